package egress

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/url"
	"sort"
	"strings"
)

// An upstream may echo a request's headers back (an echo service, an
// error page quoting the request): the secret the proxy added would reach
// the sandbox. So on an intercepted connection every response is redacted
// before it is passed on: its status line, headers and body, the body
// after undoing its transfer coding (chunked) and content coding (gzip,
// deflate; the proxy asks upstream for nothing else and refuses anything
// else). Each secret's value is replaced by its placeholder in these
// forms: as is; URL-escaped (query and path); JSON-escaped; and base64
// (standard and URL alphabets, padded or not, at any of the three byte
// alignments: the value inside a longer encoded string, e.g. Basic
// credentials "user:value"). Replacement streams: a value split across
// reads or chunks is found, and no more than the longest form is held
// back. Not covered: other transformations (hex, hashes, parts of the
// value, other content codings, compression inside the body).

// minDerivedLen is the shortest encoded form worth redacting: shorter
// ones would match by chance and garble unrelated text.
const minDerivedLen = 8

// Redactor replaces secrets' values (in every form it knows) with their
// placeholders.
type Redactor struct {
	pats [][]byte
	repl [][]byte
	max  int
}

// NewRedactor makes the redactor of secrets; nil when there is nothing to
// redact.
func NewRedactor(secrets []Secret) *Redactor {
	r := &Redactor{}
	seen := map[string]bool{}
	add := func(form string, s Secret, derived bool) {
		if form == "" || seen[form] || (derived && len(form) < minDerivedLen) {
			return
		}
		seen[form] = true
		r.pats = append(r.pats, []byte(form))
		r.repl = append(r.repl, []byte(Placeholder(s.Name)))
	}
	for _, s := range secrets {
		v := s.Value
		if v == "" {
			continue
		}
		add(v, s, false)
		add(url.QueryEscape(v), s, true)
		add(url.PathEscape(v), s, true)
		if j, err := json.Marshal(v); err == nil {
			add(string(j[1:len(j)-1]), s, true)
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			add(enc.EncodeToString([]byte(v)), s, true)
			for _, core := range base64Cores(enc.WithPadding(base64.NoPadding), []byte(v)) {
				add(core, s, true)
			}
		}
	}
	if len(r.pats) == 0 {
		return nil
	}
	// Longest first: at one position the longest form wins.
	idx := make([]int, len(r.pats))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return len(r.pats[idx[a]]) > len(r.pats[idx[b]]) })
	pats, repl := make([][]byte, len(idx)), make([][]byte, len(idx))
	for i, j := range idx {
		pats[i], repl[i] = r.pats[j], r.repl[j]
	}
	r.pats, r.repl, r.max = pats, repl, len(pats[0])
	return r
}

// base64Cores are the characters of v's encoding that depend on v alone,
// when v starts at each of the three byte offsets in a longer encoded
// string.
func base64Cores(enc *base64.Encoding, v []byte) []string {
	var out []string
	for k := 0; k < 3; k++ {
		s := enc.EncodeToString(append(make([]byte, k), v...))
		start := (8*k + 5) / 6
		end := 8 * (k + len(v)) / 6
		if end > start {
			out = append(out, s[start:end])
		}
	}
	return out
}

// String redacts s.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	out, _ := r.process([]byte(s), true, nil)
	return string(out)
}

// Header redacts every name and value of h in place.
func (r *Redactor) Header(h map[string][]string) {
	if r == nil {
		return
	}
	for k, vs := range h {
		nk := r.String(k)
		for i, v := range vs {
			vs[i] = r.String(v)
		}
		if nk != k {
			delete(h, k)
			h[nk] = append(h[nk], vs...)
		}
	}
}

// process redacts data. Unless final, a match may still begin in the last
// max-1 bytes: they are returned as carry, for the next call to see them
// again with what follows.
func (r *Redactor) process(data []byte, final bool, out []byte) (emitted, carry []byte) {
	// next[i] is where pats[i] next occurs at or after pos (-1: nowhere),
	// so each pattern scans data once.
	next := make([]int, len(r.pats))
	for i, p := range r.pats {
		next[i] = bytes.Index(data, p)
	}
	decided := len(data) - r.max // a match starting after this may be longer with more data
	pos := 0
	for {
		best := -1
		for i, n := range next {
			if n >= 0 && n < pos {
				if j := bytes.Index(data[pos:], r.pats[i]); j >= 0 {
					n = pos + j
				} else {
					n = -1
				}
				next[i] = n
			}
			if n >= 0 && (best < 0 || n < next[best]) {
				best = i // pats are longest first: ties keep the longest
			}
		}
		if best < 0 || (!final && next[best] > decided) {
			break
		}
		at := next[best]
		out = append(out, data[pos:at]...)
		out = append(out, r.repl[best]...)
		pos = at + len(r.pats[best])
	}
	end := len(data)
	if !final {
		end = max(pos, decided+1)
		end = min(end, len(data))
	}
	out = append(out, data[pos:end]...)
	return out, data[end:]
}

// Reader redacts what src yields, streaming.
func (r *Redactor) Reader(src io.Reader) io.Reader {
	if r == nil {
		return src
	}
	return &redactReader{r: r, src: src, buf: make([]byte, 32<<10)}
}

type redactReader struct {
	r     *Redactor
	src   io.Reader
	buf   []byte
	carry []byte
	out   []byte
	err   error
}

func (rr *redactReader) Read(p []byte) (int, error) {
	for len(rr.out) == 0 {
		if rr.err != nil {
			return 0, rr.err
		}
		n, err := rr.src.Read(rr.buf)
		data := append(rr.carry, rr.buf[:n]...)
		var carry []byte
		rr.out, carry = rr.r.process(data, err != nil, rr.out[:0])
		rr.carry = append([]byte(nil), carry...)
		rr.err = err
	}
	n := copy(p, rr.out)
	rr.out = rr.out[n:]
	return n, nil
}

// decodeBody undoes a response's content coding so the redactor sees the
// bytes that carry the secret; ok is false for a coding it cannot read.
func decodeBody(coding string, body io.Reader) (io.Reader, bool, error) {
	switch strings.ToLower(strings.TrimSpace(coding)) {
	case "", "identity":
		return body, true, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		return zr, true, err
	case "deflate":
		// RFC 9110 deflate is zlib; some servers send raw deflate.
		br := bufio.NewReader(body)
		head, err := br.Peek(2)
		if err == nil && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 && head[0]&0x0f == 8 {
			zr, err := zlib.NewReader(br)
			return zr, true, err
		}
		return flate.NewReader(br), true, nil
	}
	return nil, false, nil
}
