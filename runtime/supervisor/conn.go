package supervisor

import (
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A server's state (its runs, workers, reaper) outlives the connections
// that carry its requests and events. Serve has one, the host's stdin and
// stdout; ServeListener has one network connection at a time. Whoever is in
// control (server.ctrl) gets the events nobody asked for (exits); a
// request's answers go back on the connection it came on, and a foreground
// run's output to the connection that started it. When that connection
// ends, its foreground runs are killed, since their caller is gone; a
// background run lives on, and its exit goes to whoever is in control when
// it ends.

// Why the supervisor kills a foreground run (RunStatus.Reason).
const (
	reasonConnEnded = "the connection that started it in the foreground ended: its caller is gone"
	reasonTakeover  = "another connection took over the supervisor: its caller is gone"
)

// retireTimeout bounds what a connection that was taken over still gets:
// the error event that says why, and the end of a write it was blocked in.
const retireTimeout = time.Second

// conn is one connection carrying requests in and events out.
type conn struct {
	s      *server
	peer   string    // who is at the other end, for the log
	closer io.Closer // closed when it ends; nil: the caller's (Serve's)

	outMu  sync.Mutex
	out    io.Writer
	outErr error

	endOnce sync.Once
	why     error         // why it ended, once dead is closed
	dead    chan struct{} // closed when writing failed or it was ended

	gone string // guarded by s.mu: why it no longer controls the server

	filesOnce  sync.Once
	filesState *fileState // its puts in flight (files.go)
}

func newConn(s *server, out io.Writer, closer io.Closer, peer string) *conn {
	return &conn{s: s, out: out, closer: closer, peer: peer, dead: make(chan struct{})}
}

// send writes one event; after a failed write, or once c ended, every
// later one is dropped.
func (c *conn) send(ev Event) {
	select {
	case <-c.dead:
		return
	default:
	}
	c.outMu.Lock()
	defer c.outMu.Unlock()
	c.sendLocked(ev)
}

// sendLocked is send with c.outMu held.
func (c *conn) sendLocked(ev Event) {
	if c.outErr != nil {
		return
	}
	if err := WriteFrame(c.out, ev); err != nil {
		c.outErr = err
		c.end(err)
	}
}

// end ends c for why: no more events, and its connection is closed (which
// ends the read of its requests).
func (c *conn) end(why error) {
	c.endOnce.Do(func() {
		c.why = why
		close(c.dead)
		c.abortPuts()
		if c.closer != nil {
			_ = c.closer.Close()
		}
	})
}

// err is why c ended, once dead is closed.
func (c *conn) err() error {
	<-c.dead
	return c.why
}

// retire tells c it was taken over, then ends it; a write it is blocked in
// fails within retireTimeout.
func (c *conn) retire() {
	if nc, ok := c.closer.(net.Conn); ok {
		_ = nc.SetWriteDeadline(time.Now().Add(retireTimeout))
	}
	msg := "another connection took over the supervisor"
	c.send(Event{Ev: EvError, Error: msg})
	c.end(errTakenOver)
}

// releaseLocked takes control from c for why (a reason*), if it had it,
// and kills its foreground runs. s.mu is held.
func (s *server) releaseLocked(c *conn, why string) {
	if c.gone != "" {
		return
	}
	c.gone = why
	if s.ctrl == c {
		s.ctrl = nil
	}
	for _, r := range s.runs {
		if r.owner == c && !r.background && !r.mainExited {
			s.killOrphanLocked(r, why)
		}
	}
}

// killOrphanLocked kills a foreground run whose caller is gone; it ends
// as any run does (reaped, swept, its exit sent), its status saying why.
// s.mu is held. The main process is killed by pid as well: it may not have
// made its process group yet.
func (s *server) killOrphanLocked(r *run, why string) {
	if r.reason == "" {
		r.reason = "killed: " + why
	}
	_ = unix.Kill(-r.pid, unix.SIGKILL)
	_ = unix.Kill(r.pid, unix.SIGKILL)
}
