package jsonrpc

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
)

// bigRequest is the size of a request line after whose call the server
// returns freed memory to the system (see returnMemory).
const bigRequest = 1 << 20

// returnMemory gives the heap of finished large requests back to the
// system, at most once a second, so a burst of large requests does not
// leave the daemon's RSS at its peak for good.
func (s *Server) returnMemory() {
	now := time.Now().UnixNano()
	last := s.lastFree.Load()
	if now-last < int64(time.Second) || !s.lastFree.CompareAndSwap(last, now) {
		return
	}
	debug.FreeOSMemory()
}

// holdStep is the granularity in which a line being read is accounted.
const holdStep = 64 << 10

// reserve accounts the line being read as n bytes long to the uid; false
// when that would go over MaxRequestBytesPerUID.
func (c *conn) reserve(n int) bool {
	if int64(n) <= c.held {
		return true
	}
	grow := (int64(n) - c.held + holdStep - 1) / holdStep * holdStep
	if !c.s.growBytes(c.peer.UID, c.held, grow) {
		return false
	}
	c.held += grow
	return true
}

// lineDone gives back what the last line still held (one that was refused
// or never became a call) and the buffer of a large one.
func (c *conn) lineDone() {
	if c.held > 0 {
		c.s.releaseBytes(c.peer.UID, c.held)
		c.held = 0
	}
	if cap(c.buf) > 64<<10 {
		c.buf = nil // do not keep a megabyte per idle connection
		c.s.returnMemory()
	}
}

// growBytes accounts n more bytes to a uid's requests in flight, of which
// the caller's line already holds have; false when it would go over
// MaxRequestBytesPerUID. A line that is all the uid has in flight may
// always grow (up to MaxLineBytes).
func (s *Server) growBytes(uid uint32, have, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	max := s.opts.MaxRequestBytesPerUID
	if max > 0 && s.reqBytes[uid] > have && s.reqBytes[uid]+n > max {
		return false
	}
	s.reqBytes[uid] += n
	return true
}

// bytesInFlightError is the refusal of a line over the uid's request bytes.
func (s *Server) bytesInFlightError(uid uint32) *Error {
	return &Error{Code: CodeLimitExceeded, Kind: api.KindLimitExceeded,
		Message: fmt.Sprintf("uid %d has more than %d bytes of requests in flight (daemon.max_request_bytes_per_uid); wait for calls to finish or send less per call", uid, s.opts.MaxRequestBytesPerUID),
		Data:    map[string]any{"limit": s.opts.MaxRequestBytesPerUID}}
}

func (s *Server) releaseBytes(uid uint32, n int64) {
	s.mu.Lock()
	if s.reqBytes[uid] -= n; s.reqBytes[uid] <= 0 {
		delete(s.reqBytes, uid)
	}
	s.mu.Unlock()
}
