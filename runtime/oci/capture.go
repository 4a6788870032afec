package oci

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// Capture drains one of the container's output pipes. It keeps at most limit
// bytes, passes what it keeps to an optional live sink, and signals over the
// first time the stream goes past the limit so the driver can kill the
// sandbox. It keeps reading (and discarding) after that, so the writer never
// blocks on a full pipe while the kill is on its way. Memory use is bounded by
// limit plus one read buffer, whatever the script writes.
type Capture struct {
	limit     int64
	sink      runtime.StreamSink
	Over      chan struct{} // closed once when the limit is passed
	Done      chan struct{} // closed when the pipe hit EOF or was closed
	mu        sync.Mutex
	buf       bytes.Buffer
	truncated bool
	overOnce  sync.Once
}

const captureChunk = 32 << 10

func NewCapture(limit int64, sink runtime.StreamSink) *Capture {
	return &Capture{limit: limit, sink: sink, Over: make(chan struct{}), Done: make(chan struct{})}
}

// Drain reads r until EOF or until r is closed or its deadline passes.
func (c *Capture) Drain(r io.Reader) {
	defer close(c.Done)
	chunk := make([]byte, captureChunk)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			c.add(chunk[:n])
		}
		if err != nil {
			return
		}
	}
}

func (c *Capture) add(p []byte) {
	c.mu.Lock()
	room := c.limit - int64(c.buf.Len())
	keep := p
	if int64(len(keep)) > room {
		if room < 0 {
			room = 0
		}
		keep = keep[:room]
		c.truncated = true
	}
	c.buf.Write(keep)
	c.mu.Unlock()
	if len(keep) > 0 && c.sink != nil {
		// A failing sink must not stop the drain (the pipe would fill up).
		_, _ = c.sink.Write(keep)
	}
	if len(keep) < len(p) {
		c.overOnce.Do(func() { close(c.Over) })
	}
}

// Result returns the kept bytes and whether anything was dropped.
func (c *Capture) Result() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes()), c.truncated
}

// StopDraining makes a drain that is still blocked (some process outside
// the sandbox kept the write end open) return now.
func StopDraining(f *os.File) {
	if err := f.SetReadDeadline(time.Unix(1, 0)); err != nil && !errors.Is(err, os.ErrNoDeadline) {
		_ = f.Close()
	}
}
