// Package tarstream carries files into and out of a sandbox as tar
// streams, for the backends that cannot share a directory with it (the
// kubernetes backend, and the in-sandbox supervisor that receives a run's
// inputs and gives back its workdir over one connection). What comes out
// of a sandbox is untrusted, and so is a stream a peer sends: every
// stream is read through a bound, names are confined to the directory
// being unpacked into, and links are made, never followed. Unpack is the
// lenient side (a sandbox's outputs: what cannot be made is named, not
// made), Extract the strict one (files a host delivers: anything unsafe
// fails the whole stream), WriteInputs and WriteDir the writers.
package tarstream

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrOver is the error of a Bounded reader past its bound.
var ErrOver = errors.New("stream over its bound")

// boundedReader reads r up to n bytes, then fails with ErrOver.
type boundedReader struct {
	r io.Reader
	n int64
}

// Bounded reads r up to n bytes; a read past them fails with ErrOver, and
// one at the very end of r with r's own io.EOF.
func Bounded(r io.Reader, n int64) io.Reader { return &boundedReader{r: r, n: n} }

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		// One byte more says whether the stream ends here.
		var one [1]byte
		if n, err := b.r.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, ErrOver
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	return n, err
}

// SparseEntry says whether a tar entry is a sparse file (GNU or PAX
// sparse formats), whose length is not what the stream carries:
// archive/tar reads its holes as zeros, so a few bytes of stream would be
// written out as h.Size bytes, past any bound on the stream.
func SparseEntry(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// MaxNotes is how many entries Unpack's notes name, as the collector
// names at most so many skipped entries.
const MaxNotes = 100

// LimitNotes keeps the first MaxNotes notes and counts the rest.
func LimitNotes(notes []string) []string {
	if len(notes) <= MaxNotes {
		return notes
	}
	return append(notes[:MaxNotes:MaxNotes], fmt.Sprintf("... and %d more entries of the workdir's tar stream not collected", len(notes)-MaxNotes))
}

// DigestPrefix starts every digest this package makes or checks.
const DigestPrefix = "sha256:"

// Digest is the digest of b as Measure and Extract's callers say it.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return DigestPrefix + hex.EncodeToString(sum[:])
}

// ValidDigest says whether d is a digest of the form Digest makes.
func ValidDigest(d string) bool {
	h, ok := strings.CutPrefix(d, DigestPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Measure runs write into a counter and a hash and returns the size and
// digest of what it wrote: a stream that is sent with its size and digest
// stated up front is written twice, once here and once to its peer, by a
// writer that writes the same bytes each time (the same inputs and
// modification time).
func Measure(write func(io.Writer) error) (size int64, digest string, err error) {
	h := sha256.New()
	c := &countWriter{w: h}
	if err := write(c); err != nil {
		return 0, "", err
	}
	return c.n, DigestPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// countWriter counts what goes through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
