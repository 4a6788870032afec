package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/tarstream"
)

// PutOption sets an option of Put.
type PutOption func(*Request)

// ReadOnly puts the stream's files 0444 (0555 when executable) and its
// directories 0555, owned by the agent: a skill's files, which the job
// must not change.
func ReadOnly() PutOption { return func(r *Request) { r.ReadOnly = true } }

// Put is what a put made.
type Put struct {
	Entries int
	Size    int64
}

// Put sends the tar stream r, of size bytes and digest ("sha256:HEX",
// tarstream.Measure), to be extracted into dir in the sandbox (under one
// of the agent's file roots). Nothing of it is there until the agent had
// the whole stream with that size and digest; a stream that is not
// (r shorter or longer, another digest), an unsafe entry (a name out of
// dir, a link to follow, a device), or a put the agent refuses is an
// ErrRefused error that says why. When ctx ends or r fails, the put is
// ended short (the agent drops it) and the error returned.
func (c *Client) Put(ctx context.Context, dir string, r io.Reader, digest string, size int64, opts ...PutOption) (Put, error) {
	req := Request{Op: OpPut, FileRequest: FileRequest{Dir: dir, Size: size, Digest: digest}}
	for _, o := range opts {
		o(&req)
	}
	if !tarstream.ValidDigest(digest) || size < 0 {
		return Put{}, errkind.Errorf(ErrRefused, "put into %s: digest %q and size %d: want sha256:<64 hex digits> and a size of 0 or more", dir, truncate(digest), size)
	}
	seq, ch, err := c.begin()
	if err != nil {
		return Put{}, err
	}
	defer c.end(seq)
	req.Seq = seq
	buf := make([]byte, PutChunk)
	var sent int64
	first := true
	var readErr error
	for {
		n, err := io.ReadFull(r, buf[:min(int64(PutChunk), size-sent)])
		sent += int64(n)
		more := sent < size && err == nil
		var extra []byte
		switch {
		case err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
			readErr = fmt.Errorf("put into %s: read the stream: %w", dir, err)
		case err == nil && sent == size:
			// The stream should end here: a byte more is sent, and the
			// agent refuses a stream longer than stated.
			var one [1]byte
			if k, _ := io.ReadFull(r, one[:]); k == 1 {
				extra, more = one[:], true
			}
		}
		if ctx.Err() != nil {
			// Ended short: the agent drops a stream it did not have whole.
			n, more, extra = 0, false, nil
			readErr = fmt.Errorf("put into %s: %w", dir, ctx.Err())
		}
		req.Data, req.More = buf[:n], more
		if !first {
			req = Request{Op: OpPutData, Seq: seq, FileRequest: FileRequest{Data: buf[:n], More: more}}
		}
		first = false
		if err := c.send(req); err != nil {
			return Put{}, err
		}
		if extra != nil {
			if err := c.send(Request{Op: OpPutData, Seq: seq, FileRequest: FileRequest{Data: extra}}); err != nil {
				return Put{}, err
			}
			more = false
		}
		if !more {
			break
		}
		select {
		case ev := <-ch: // answered early: it failed; the stream is ended
			_ = c.send(Request{Op: OpPutData, Seq: seq})
			return Put{}, c.answer(OpPut, ev)
		default:
		}
	}
	if readErr != nil {
		return Put{}, readErr
	}
	ev, err := c.wait(ctx, OpPut, ch)
	if err != nil {
		return Put{}, err
	}
	if ev.Ev != EvPut {
		return Put{}, errkind.Errorf(ErrProtocol, "put answered with a %s event", ev.Ev)
	}
	return Put{Entries: ev.Entries, Size: ev.Size}, nil
}

// Collected is what a collect brought back.
type Collected struct {
	Size    int64 // of the stream
	Entries int
	// Truncated says the stream stopped at the bound, before Omitted.
	Truncated bool
	Omitted   string
	// Notes name what the agent did not write as it is ("path: why");
	// Skipped (CollectInto) what was not unpacked here.
	Notes   []string
	Skipped []string
}

// Collect has the agent stream a tar of dir (under one of its file roots)
// of at most maxBytes bytes, and writes it to w on the client's reader
// goroutine (so w must not block for long: everything else the agent
// says waits for it). A stream the bound stopped is whole and says so
// (Truncated, Omitted); one the agent sends past the bound, or whose
// size or digest is not what it then says, is an ErrProtocol error.
func (c *Client) Collect(ctx context.Context, dir string, maxBytes int64, w io.Writer) (Collected, error) {
	seq, ch, err := c.begin()
	if err != nil {
		return Collected{}, err
	}
	defer c.end(seq)
	cs := &collectStream{w: w, max: maxBytes, h: sha256.New()}
	c.mu.Lock()
	c.collects[seq] = cs
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.collects, seq)
		c.mu.Unlock()
	}()
	if err := c.send(Request{Op: OpCollect, Seq: seq, FileRequest: FileRequest{Dir: dir, MaxBytes: maxBytes}}); err != nil {
		return Collected{}, err
	}
	ev, err := c.wait(ctx, OpCollect, ch)
	if err != nil {
		return Collected{}, err
	}
	if ev.Ev != EvCollected {
		return Collected{}, errkind.Errorf(ErrProtocol, "collect answered with a %s event", ev.Ev)
	}
	c.mu.Lock() // the data events came before, on the same goroutine
	n, werr, over, sum := cs.n, cs.err, cs.over, tarstream.DigestPrefix+hex.EncodeToString(cs.h.Sum(nil))
	c.mu.Unlock()
	switch {
	case over:
		return Collected{}, errkind.Errorf(ErrProtocol, "collect %s: the agent sent more than the %d bytes asked for", dir, maxBytes)
	case werr == nil && (n != ev.Size || sum != ev.Digest):
		return Collected{}, errkind.Errorf(ErrProtocol, "collect %s: %d bytes of digest %s came, the agent says %d of %s", dir, n, sum, ev.Size, truncate(ev.Digest))
	case werr != nil:
		return Collected{}, fmt.Errorf("collect %s: write the stream: %w", dir, werr)
	}
	return Collected{Size: ev.Size, Entries: ev.Entries, Truncated: ev.Truncated, Omitted: ev.Omitted, Notes: ev.Notes}, nil
}

// CollectInto collects dir as Collect does and unpacks the stream into
// into, a private directory on the host, with tarstream.Unpack (names
// confined to it, links made and never followed, devices named and not
// made); what it did not unpack is in Skipped.
func (c *Client) CollectInto(ctx context.Context, dir string, maxBytes int64, into string) (Collected, error) {
	if fi, err := os.Lstat(into); err != nil || !fi.IsDir() {
		return Collected{}, fmt.Errorf("collect %s into %s: not a directory", dir, into)
	}
	pr, pw := io.Pipe()
	type unpacked struct {
		skipped []string
		err     error
	}
	done := make(chan unpacked, 1)
	go func() {
		skipped, err := tarstream.Unpack(tarstream.Bounded(pr, maxBytes), into)
		if err == nil {
			_, err = io.Copy(io.Discard, pr) // the trailer
		}
		pr.CloseWithError(io.ErrClosedPipe)
		done <- unpacked{skipped, err}
	}()
	col, err := c.Collect(ctx, dir, maxBytes, pw)
	pw.CloseWithError(err)
	u := <-done
	if err != nil {
		return Collected{}, err
	}
	if u.err != nil {
		return col, fmt.Errorf("collect %s: unpack: %w", dir, u.err)
	}
	col.Skipped = tarstream.LimitNotes(u.skipped)
	return col, nil
}

// Clear has the agent remove every entry in dir (under one of its file
// roots), dir itself kept.
func (c *Client) Clear(ctx context.Context, dir string) error {
	_, err := c.call(ctx, Request{Op: OpClear, FileRequest: FileRequest{Dir: dir}})
	return err
}

// collectStream is a collect's data as it comes; c.mu guards it.
type collectStream struct {
	w    io.Writer
	max  int64
	n    int64
	h    hash.Hash
	over bool
	err  error
}

// write takes one data event (on the reader goroutine, outside c.mu:
// only the reader goroutine writes, Collect reads after the answer).
func (cs *collectStream) write(p []byte) {
	if cs.over || cs.err != nil {
		return
	}
	if cs.n+int64(len(p)) > cs.max {
		cs.over = true
		return
	}
	cs.n += int64(len(p))
	cs.h.Write(p)
	if _, err := cs.w.Write(p); err != nil {
		cs.err = err
	}
}

// begin takes a seq for a call whose answer comes on ch.
func (c *Client) begin() (uint64, chan Event, error) {
	ch := make(chan Event, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, nil, c.err
	}
	c.seq++
	c.pending[c.seq] = ch
	return c.seq, ch, nil
}

func (c *Client) end(seq uint64) {
	c.mu.Lock()
	delete(c.pending, seq)
	c.mu.Unlock()
}

// wait waits for the answer of a call begun with begin.
func (c *Client) wait(ctx context.Context, op string, ch chan Event) (Event, error) {
	select {
	case ev := <-ch:
		return ev, c.answer(op, ev)
	case <-c.dead:
		return Event{}, c.Err()
	case <-ctx.Done():
		return Event{}, fmt.Errorf("supervisor %s: %w", op, ctx.Err())
	}
}

// answer is the error of an error event.
func (c *Client) answer(op string, ev Event) error {
	if ev.Ev == EvError {
		return errkind.Errorf(ErrRefused, "%s: %s", op, ev.Error)
	}
	return nil
}
