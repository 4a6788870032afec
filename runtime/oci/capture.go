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

// Captures are a job's stdout and stderr captures at lim's caps, fed
// through in-process pipes by whatever carries the job's output (a
// supervisor's client, an exec stream): write to Stdout and Stderr, and
// Close once nothing more comes.
type Captures struct {
	Out, Err       *Capture
	Stdout, Stderr *io.PipeWriter
}

// NewCaptures starts draining a job's output at lim's caps into inv's
// sinks.
func NewCaptures(lim runtime.Limits, inv runtime.Invocation) *Captures {
	c := &Captures{Out: NewCapture(lim.StdoutBytes, inv.Stdout), Err: NewCapture(lim.StderrBytes, inv.Stderr)}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	c.Stdout, c.Stderr = outW, errW
	go c.Out.Drain(outR)
	go c.Err.Drain(errR)
	return c
}

// Close ends both streams and waits until everything written is kept.
func (c *Captures) Close() {
	c.Stdout.Close()
	c.Stderr.Close()
	<-c.Out.Done
	<-c.Err.Done
}

// Fill puts what was kept of both streams into res (after Close).
func (c *Captures) Fill(res *runtime.Result) {
	res.Stdout, res.StdoutTruncated = c.Out.Result()
	res.Stderr, res.StderrTruncated = c.Err.Result()
}
