package mcp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
)

// guard returns the transport Connect serves instead of t. A message that
// holds one member name twice in an object would be run with the last
// value (encoding/json keeps it, and matches fields ignoring case) while a
// reader of the raw message may go by the first, so such a message is
// refused before the SDK decodes it, by the same scan as the socket's
// JSON-RPC (api.DuplicateKey). That needs the raw bytes: the stdio and IO
// transports, which carry a client's bytes, are replaced by a lineGuard
// over the same streams. Other transports (in-memory, in-process) are
// served as they are.
func (s *Server) guard(t sdk.Transport) sdk.Transport {
	switch t := t.(type) {
	case *sdk.StdioTransport:
		return &lineGuard{r: os.Stdin, w: nopCloser{os.Stdout}, max: t.MaxLineLength, log: s.log, onRefused: s.opts.OnRefused}
	case *sdk.IOTransport:
		return &lineGuard{r: t.Reader, w: t.Writer, max: t.MaxLineLength, log: s.log, onRefused: s.opts.OnRefused}
	}
	return t
}

// lineGuard is the SDK's newline-delimited transport over r and w, with
// every line checked before the SDK reads it. A line that is refused is
// answered here with a JSON-RPC error (the request's id when it can be
// told) and never reaches the SDK, so nothing of it runs and the
// connection stays up; it is reported to onRefused (the audit log) first.
type lineGuard struct {
	r         io.ReadCloser
	w         io.WriteCloser
	max       int // bytes per line; 0: sdk.DefaultMaxLineLength; negative: no cap
	log       hclog.Logger
	onRefused func(api.Refusal)
}

func (g *lineGuard) Connect(ctx context.Context) (sdk.Connection, error) {
	w := &lockedWriter{w: g.w}
	f := &lineFilter{src: g.r, br: bufio.NewReaderSize(g.r, 64<<10), w: w, max: g.max, log: g.log, onRefused: g.onRefused}
	if f.max == 0 {
		f.max = sdk.DefaultMaxLineLength
	}
	// The filter caps lines itself (answering an over-long one rather than
	// hanging up), so the SDK's cap is off.
	return (&sdk.IOTransport{Reader: f, Writer: w, MaxLineLength: -1}).Connect(ctx)
}

// lineFilter is the reader the SDK decodes: the client's lines that pass,
// each complete and newline-terminated.
type lineFilter struct {
	src io.ReadCloser
	br  *bufio.Reader
	w   *lockedWriter
	max int
	log hclog.Logger
	// onRefused is told about each refused line before it is answered.
	onRefused func(api.Refusal)
	buf       []byte // the line being read
	lineBytes int    // the whole length of the line read last
	pending   []byte // what is left of the last line that passed
	err       error  // the error that ends the stream, once the lines before it are read
}

func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		line, tooLong, err := f.readLine()
		if err != nil {
			f.err = err
		}
		if tooLong {
			f.refuse(api.Refusal{Code: jsonrpc.CodeInvalidRequest, Kind: api.KindLimitExceeded, LineBytes: f.lineBytes,
				Message: fmt.Sprintf("invalid request: a message is longer than %d bytes; send smaller messages (large inputs belong in files the script reads)", f.max)})
			continue
		}
		f.pending = f.check(line)
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

func (f *lineFilter) Close() error { return f.src.Close() }

// readLine reads the next line, keeping at most max bytes of it: a longer
// line is read to its end and reported as too long.
func (f *lineFilter) readLine() (line []byte, tooLong bool, err error) {
	f.buf, f.lineBytes = f.buf[:0], 0
	for {
		chunk, err := f.br.ReadSlice('\n')
		f.lineBytes += len(bytes.TrimSuffix(chunk, []byte("\n")))
		if !tooLong {
			if f.max > 0 && len(f.buf)+len(chunk) > f.max {
				tooLong, f.buf = true, f.buf[:0]
			} else {
				f.buf = append(f.buf, chunk...)
			}
		}
		if err != bufio.ErrBufferFull {
			return f.buf, tooLong, err
		}
	}
}

// check returns line as the SDK should read it, or nil when it is refused
// (answered here) or blank.
func (f *lineFilter) check(line []byte) []byte {
	body := bytes.TrimSpace(line)
	if len(body) == 0 {
		return nil
	}
	// A line that is not JSON on its own is refused rather than handed on:
	// the SDK's decoder would join it with the next lines into one message
	// that nothing here has checked.
	if !json.Valid(body) {
		f.refuse(api.Refusal{Code: jsonrpc.CodeParseError, Kind: api.KindInvalidParams, LineBytes: len(body), LineSHA256: sha256Hex(body),
			Message: "parse error: the line is not valid JSON; send one JSON-RPC message per line, complete on its line (MCP over stdio allows no newline inside a message)"})
		return nil
	}
	where, name, dup := api.DuplicateKey(body)
	if !dup {
		return append(body, '\n')
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(body, &m) // stays nil for a batch (array)
	// Echo the id only when it was not itself repeated.
	var id json.RawMessage
	if raw, ok := m["id"]; ok && validID(raw) && (where != "" || !strings.EqualFold(name, "id")) {
		id = raw
	}
	var code int
	var msg string
	switch {
	case where == "":
		code = jsonrpc.CodeInvalidRequest
		msg = fmt.Sprintf("invalid request: member %q appears twice (names are compared ignoring case); send each member once", name)
	case where == "params" || strings.HasPrefix(where, "params.") || strings.HasPrefix(where, "params["):
		code = jsonrpc.CodeInvalidParams
		msg = fmt.Sprintf("invalid params: key %q appears twice in %s (keys are compared ignoring case, as fields are matched); send each key once", name, where)
	default: // a response's result or error, or a batch
		code = jsonrpc.CodeInvalidRequest
		msg = fmt.Sprintf("invalid message: key %q appears twice in %s (keys are compared ignoring case, as fields are matched); send each key once", name, where)
	}
	r := api.Refusal{Code: code, Kind: api.KindInvalidParams, Message: msg, LineBytes: len(body), LineSHA256: sha256Hex(body)}
	if raw, ok := m["method"]; ok && !(where == "" && strings.EqualFold(name, "method")) {
		_ = json.Unmarshal(raw, &r.Method)
	}
	if _, isRequest := m["method"]; !isRequest && id != nil {
		// The client's answer to one of the server's requests (an
		// elicitation, say): the server's call fails with the reason
		// instead of waiting, and the client is told with a null id (its
		// own requests use ids of their own).
		f.refuse(r)
		out, err := json.Marshal(errorResponse(id, code, "the client's response was refused: "+msg))
		if err != nil {
			return nil
		}
		return append(out, '\n')
	}
	r.ID = id
	f.refuse(r)
	return nil
}

// refuse audits r (through onRefused) and answers the client with a
// JSON-RPC error for r.ID (null when it cannot be told). A failed write
// ends the stream, as the SDK's own writes would.
func (f *lineFilter) refuse(r api.Refusal) {
	f.log.Warn("refused a message from the client", "id", string(r.ID), "error", r.Message)
	if f.onRefused != nil {
		r.Transport = "mcp"
		f.onRefused(r)
	}
	out, err := json.Marshal(errorResponse(r.ID, r.Code, r.Message))
	if err == nil {
		_, err = f.w.Write(append(out, '\n'))
	}
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("answering a refused message: %w", err)
	}
}

type wireError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type wireResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   wireError       `json:"error"`
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func errorResponse(id json.RawMessage, code int, msg string) wireResponse {
	if id == nil {
		id = json.RawMessage("null")
	}
	return wireResponse{JSONRPC: "2.0", ID: id, Error: wireError{Code: code, Message: msg}}
}

// validID reports whether raw is an id the SDK accepts: a string or a
// number.
func validID(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch v.(type) {
	case string, float64:
		return true
	}
	return false
}

// lockedWriter serializes the SDK's writes and the refusals, so each
// message goes out whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
