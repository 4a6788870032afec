package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/sandbox/api"
)

// conn is one client connection.
type conn struct {
	s       *Server
	id      uint64
	nc      net.Conn
	peer    api.Peer
	peerErr error  // from reading the credentials at accept
	release func() // gives back the connection's count (Server.conncap)
	ctx     context.Context
	cancel  context.CancelCauseFunc
	log     hclog.Logger

	wmu sync.Mutex // serialises response lines

	imu      sync.Mutex
	inflight map[string]context.CancelCauseFunc // by raw request id

	sem    chan struct{}  // bounds calls in flight on this conn
	calls  sync.WaitGroup // this conn's handler goroutines
	active atomic.Int32

	buf []byte // the current request line
	// held is how many bytes of the line being read (or just read) are
	// accounted to the uid's request bytes; dispatch takes them over.
	held int64

	notes chan note // notifications waiting for writeNotes
}

// close cancels the conn's calls with cause and closes the socket; the
// reader then exits.
func (c *conn) close(cause error) {
	c.cancel(cause)
	c.nc.Close()
}

func (c *conn) serve() {
	s := c.s
	defer func() {
		c.close(ErrClientGone)
		c.calls.Wait()
		if s.opts.OnConnClosed != nil {
			c.hook("OnConnClosed", func() { s.opts.OnConnClosed(c.id, c.peer) })
		}
		s.mu.Lock()
		delete(s.conns, c)
		c.release()
		s.mu.Unlock()
		s.connWG.Done()
		c.log.Debug("connection closed", "cause", context.Cause(c.ctx))
	}()

	peer, err := c.peer, c.peerErr
	if err != nil {
		c.log.Warn("connection refused: cannot read peer credentials", "error", err)
		if s.opts.OnAuthRefused != nil {
			s.opts.OnAuthRefused(api.Peer{}, err.Error())
		}
		c.cancel(errPeerCredentials)
		return
	}
	c.log = c.log.With("uid", peer.UID, "pid", peer.PID)
	if s.opts.Authorize != nil {
		if err := s.opts.Authorize(peer); err != nil {
			c.log.Warn("connection refused by policy", "peer", peer.String(), "reason", err.Error())
			if s.opts.OnAuthRefused != nil {
				s.opts.OnAuthRefused(peer, err.Error())
			}
			e := ToRPCError(err)
			e.Kind, e.Code = api.KindDenied, CodeDenied
			s.reject(c.nc, e)
			return
		}
	}
	c.log.Debug("connection accepted", "peer", peer.String())

	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		line, err := c.readLine(br)
		var tl *lineTooLongError
		switch {
		case errors.As(err, &tl):
			id := peekID(tl.prefix)
			var e *Error
			if tl.overBudget {
				c.log.Warn("request line over the uid's request bytes; discarded", "limit", s.opts.MaxRequestBytesPerUID, "bytes", tl.size)
				e = s.bytesInFlightError(c.peer.UID)
			} else {
				c.log.Warn("request line too long; discarded", "limit", s.opts.MaxLineBytes, "bytes", tl.size)
				e = &Error{
					Code:    CodeInvalidRequest,
					Kind:    api.KindLimitExceeded,
					Message: fmt.Sprintf("request line is longer than the %d-byte limit; send less per call (e.g. smaller files[])", s.opts.MaxLineBytes),
					Data:    map[string]any{"limit": s.opts.MaxLineBytes},
				}
			}
			c.callError(&CallError{ID: id, Method: peekMethod(tl.prefix), Line: tl.prefix, LineBytes: tl.size, Resp: e})
			c.writeError(id, e)
			c.lineDone()
			continue
		case err != nil:
			c.lineDone()
			c.readFailed(err)
			return
		}
		c.dispatch(line)
		c.lineDone()
	}
}

// readFailed decides how a connection whose reads ended goes away. After a
// clean EOF with calls still in flight the client may only have half-closed
// (it still wants its answers), so the calls continue until they finish or
// the client hangs up completely.
func (c *conn) readFailed(err error) {
	if errors.Is(err, errIdle) {
		c.log.Debug("closing idle connection", "idle_timeout", c.s.opts.IdleTimeout)
		return
	}
	if !errors.Is(err, errEOF) {
		c.log.Debug("read failed; closing", "error", err)
		return
	}
	if c.active.Load() == 0 {
		return
	}
	done := make(chan struct{})
	go func() { c.calls.Wait(); close(done) }()
	if waitHangup(c.nc, done, c.ctx.Done()) {
		c.log.Debug("client hung up with calls in flight; cancelling them")
	}
}

// waitHangup returns when the peer has fully closed its end (true), or done
// or stop is closed (false). Read returns EOF for a half-close as well as for
// a close, so it polls the socket for POLLHUP, which Linux reports on a Unix
// stream socket only once the peer's end is shut down in both directions.
func waitHangup(nc net.Conn, done, stop <-chan struct{}) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	for {
		select {
		case <-done:
			return false
		case <-stop:
			return false
		default:
		}
		hup := false
		cerr := raw.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd)}}
			n, err := unix.Poll(fds, 100)
			hup = err == nil && n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
		})
		if cerr != nil || hup {
			return true
		}
	}
}

var (
	errIdle = errors.New("idle timeout")
	errEOF  = errors.New("client closed its end")
)

type lineTooLongError struct {
	prefix []byte // the line's first bytes (at most peekPrefix)
	size   int    // the whole line's length, newline not counted
	// overBudget: the line went over the uid's request bytes in flight
	// (MaxRequestBytesPerUID) rather than over MaxLineBytes.
	overBudget bool
}

func (e *lineTooLongError) Error() string { return "request line too long" }

// peekPrefix is how much of an over-long line is kept to find its id.
const peekPrefix = 4 << 10

// readLine returns the next request line (including its newline), reusing
// c.buf. It waits up to IdleTimeout for the line to start (indefinitely while
// calls are in flight), then up to LineTimeout for it to complete.
func (c *conn) readLine(br *bufio.Reader) ([]byte, error) {
	o := &c.s.opts
	for {
		if o.IdleTimeout > 0 {
			c.nc.SetReadDeadline(time.Now().Add(o.IdleTimeout))
		} else {
			c.nc.SetReadDeadline(time.Time{})
		}
		_, err := br.Peek(1)
		if err == nil {
			break
		}
		if isTimeout(err) {
			if c.active.Load() > 0 {
				continue // never idle while a call is in flight
			}
			return nil, errIdle
		}
		return nil, endOfStream(err)
	}
	if o.LineTimeout > 0 {
		c.nc.SetReadDeadline(time.Now().Add(o.LineTimeout))
	} else {
		c.nc.SetReadDeadline(time.Time{})
	}
	c.buf = c.buf[:0]
	tooLong, overBudget := false, false
	total := 0
	limit := o.MaxLineBytes + 1 // the newline is not counted
	for {
		chunk, err := br.ReadSlice('\n')
		total += len(chunk)
		if !tooLong && len(c.buf)+len(chunk) > limit {
			tooLong = true
		} else if !tooLong && !c.reserve(len(c.buf)+len(chunk)) {
			// The bytes a line holds while it is read count towards the
			// uid's requests in flight, so that many connections of one
			// uid cannot each buffer a line up to the limit.
			tooLong, overBudget = true, true
		}
		if tooLong {
			// Keep what finds the id; the rest is read and dropped.
			if len(c.buf) > peekPrefix {
				c.buf = append([]byte(nil), c.buf[:peekPrefix]...)
			}
			c.buf = append(c.buf, chunk[:min(len(chunk), max(0, peekPrefix-len(c.buf)))]...)
		} else {
			c.buf = append(c.buf, chunk...)
		}
		if err == nil {
			break
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if len(c.buf) > 0 {
			c.log.Debug("connection ended inside a request line; partial line dropped", "bytes", len(c.buf))
		}
		if isTimeout(err) {
			return nil, fmt.Errorf("request line not completed within %s: %w", o.LineTimeout, err)
		}
		return nil, endOfStream(err)
	}
	if tooLong {
		return nil, &lineTooLongError{prefix: c.buf, size: total - 1, overBudget: overBudget}
	}
	return c.buf, nil
}

// endOfStream marks a clean end of the client's stream (EOF, or a reset
// from a peer that is gone) with errEOF; other errors pass through.
func endOfStream(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("%w: %v", errEOF, err)
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *conn) writeError(id json.RawMessage, e *Error) { c.write(id, nil, e) }

// write sends one response line. A failed or timed-out write closes the
// connection: the stream may now hold half a line.
func (c *conn) write(id, result json.RawMessage, e *Error) {
	b, err := marshalResponse(id, result, e)
	if err != nil {
		c.log.Error("cannot marshal response", "error", err)
		return
	}
	c.writeLine(b)
}

// writeLine writes one whole line under the write lock.
func (c *conn) writeLine(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.s.opts.WriteTimeout > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
	}
	if _, err := c.nc.Write(b); err != nil {
		if c.ctx.Err() == nil {
			c.log.Debug("write failed; closing connection", "error", err)
		}
		c.close(errWriteFailed)
	}
}
