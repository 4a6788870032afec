package supervisor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// ServeListener's rules, for whoever reads the code before the daemon's:
//
//   - One connection controls the agent at a time. A new one that passes
//     its TLS handshake and Authorize takes over: the one before is told
//     so and closed, and its foreground runs are killed. Background runs
//     live on; the new connection gets the ready event, lists them, and
//     gets their exits.
//   - A connection that does not pass costs one of MaxPending places for
//     at most HandshakeTimeout, and is closed and logged; the connection
//     in control never notices it. A connection beyond MaxPending pushes
//     out the oldest one pending, so a flood of connections that never
//     handshake holds no more than MaxPending descriptors, and a real
//     peer, whose handshake takes milliseconds, gets through.
//   - With nobody in control for IdleTimeout, the server shuts down, so an
//     agent whose daemon went away for good does not live on.

// Defaults of ListenOptions.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultMaxPending       = 4
)

// ErrIdle is the kind of ServeListener's error when it shut down because no
// connection controlled it for ListenOptions.IdleTimeout.
var ErrIdle = errors.New("supervisor idle")

// errTakenOver is why a connection that was taken over ended.
var errTakenOver = errors.New("another connection took over")

const (
	// refusalBurst is how many refused connections are logged per
	// refusalWindow; the rest are counted in the next line.
	refusalBurst  = 10
	refusalWindow = time.Minute
	// lingerLimit bounds what is read and dropped of a connection closed
	// for a broken frame, so that the error event is not lost to a reset.
	lingerLimit = 4 * MaxFrame
)

// ListenOptions are ServeListener's rules for its connections.
type ListenOptions struct {
	// Authorize, when set, checks a connection once its TLS handshake is
	// done (a *tls.Conn: ConnectionState has the peer's certificates);
	// an error refuses it. It must not block: it counts against
	// HandshakeTimeout.
	Authorize func(net.Conn) error
	// HandshakeTimeout bounds a connection's TLS handshake and Authorize
	// (0: DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// MaxPending bounds the connections in their handshake at once (0:
	// DefaultMaxPending); one more pushes out the oldest.
	MaxPending int
	// IdleTimeout, when not 0, shuts the server down after that long
	// with no connection in control (from the start, or since the last
	// one ended).
	IdleTimeout time.Duration
}

// ServeListener is a pod's agent: the server Serve is, its state outliving
// any one connection accepted on ln, of which one at a time is in control
// (see the rules above). ln is typically a tls.Listener requiring client
// certificates, with Authorize checking the peer's identity. It returns
// when ctx is done (nil), when nobody was in control for IdleTimeout (an
// ErrIdle error) or when ln fails, having closed ln and every connection
// and killed every process it started.
func ServeListener(ctx context.Context, ln net.Listener, opts Options, lopts ListenOptions) error {
	if lopts.HandshakeTimeout <= 0 {
		lopts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if lopts.MaxPending <= 0 {
		lopts.MaxPending = DefaultMaxPending
	}
	s, err := newServer(opts)
	if err != nil {
		ln.Close()
		return err
	}
	s.shutdownAsked = make(chan struct{})
	stop := s.launch()
	l := &listener{s: s, ln: ln, o: lopts, settled: make(chan struct{}), done: make(chan struct{}), conns: map[net.Conn]bool{}}
	go func() {
		// The first connection's ready event waits for the first
		// workers, as Serve's does.
		s.pool.waitReady(readyTimeout)
		close(l.settled)
	}()
	var idle <-chan time.Time
	if lopts.IdleTimeout > 0 {
		l.idle = time.NewTimer(lopts.IdleTimeout)
		idle = l.idle.C
	}
	defer func() {
		l.close()
		stop()
	}()
	acceptErr := make(chan error, 1)
	go func() { acceptErr <- l.accept() }()
	s.logf("supervisor: listening on %s", ln.Addr())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.shutdownAsked:
			s.logf("supervisor: shut down as the connection in control asked")
			return nil
		case err := <-acceptErr:
			return err
		case <-idle:
			s.mu.Lock()
			none := s.ctrl == nil
			s.mu.Unlock()
			if none {
				return errkind.Errorf(ErrIdle, "supervisor: no connection in control for %s: shut down, killing every run", lopts.IdleTimeout)
			}
		}
	}
}

// listener is one ServeListener.
type listener struct {
	s       *server
	ln      net.Listener
	o       ListenOptions
	settled chan struct{} // closed once the first workers are ready
	done    chan struct{} // closed when ServeListener returns
	idle    *time.Timer   // nil without IdleTimeout; guarded by s.mu
	closing bool          // guarded by s.mu: no more takeovers

	wg      sync.WaitGroup
	mu      sync.Mutex
	closed  bool
	conns   map[net.Conn]bool // every open connection
	pending []*pending        // in their handshake, oldest first
	logAt   time.Time         // the start of the refusal log's window
	logged  int               // refusals logged in it
	skipped int               // and not
}

// pending is a connection in its handshake.
type pending struct {
	nc       net.Conn
	evicted  bool // pushed out by a newer one; guarded by listener.mu
	accepted time.Time
}

// accept accepts connections until ln is closed.
func (l *listener) accept() error {
	var delay time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.done:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("supervisor: accept: %w", err)
			}
			// Out of descriptors and the like: it may pass.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.s.logf("supervisor: accept: %v (again in %s)", err, delay)
			select {
			case <-time.After(delay):
			case <-l.done:
				return nil
			}
			continue
		}
		delay = 0
		l.admit(nc)
	}
}

// admit starts nc's handshake, pushing out the oldest pending one if
// MaxPending are.
func (l *listener) admit(nc net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		nc.Close()
		return
	}
	if len(l.pending) >= l.o.MaxPending {
		old := l.pending[0]
		l.pending = l.pending[1:]
		old.evicted = true
		old.nc.Close()
	}
	p := &pending{nc: nc, accepted: time.Now()}
	l.pending = append(l.pending, p)
	l.conns[nc] = true
	l.wg.Add(1)
	go l.handshake(p)
}

// handshake checks p, then serves it if it passes.
func (l *listener) handshake(p *pending) {
	defer l.wg.Done()
	nc := p.nc
	err := l.check(nc, p.accepted.Add(l.o.HandshakeTimeout))
	l.mu.Lock()
	for i, x := range l.pending {
		if x == p {
			l.pending = append(l.pending[:i], l.pending[i+1:]...)
			break
		}
	}
	if p.evicted {
		err = fmt.Errorf("pushed out by newer connections while in its handshake (more than %d at once)", l.o.MaxPending)
	}
	l.mu.Unlock()
	if err != nil {
		nc.Close()
		l.forget(nc)
		l.refused(nc.RemoteAddr(), err)
		return
	}
	l.serve(nc)
	l.forget(nc)
}

// check runs nc's TLS handshake, if it is TLS, and Authorize, by deadline.
func (l *listener) check(nc net.Conn, deadline time.Time) error {
	if err := nc.SetDeadline(deadline); err != nil {
		return err
	}
	if tc, ok := nc.(*tls.Conn); ok {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := tc.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
	}
	if l.o.Authorize != nil {
		if err := l.o.Authorize(nc); err != nil {
			return fmt.Errorf("not authorized: %w", err)
		}
	}
	if time.Now().After(deadline) {
		return fmt.Errorf("handshake took longer than %s", l.o.HandshakeTimeout)
	}
	return nc.SetDeadline(time.Time{})
}

// serve puts nc in control and handles its requests until it ends.
func (l *listener) serve(nc net.Conn) {
	s := l.s
	c := newConn(s, nc, nc, nc.RemoteAddr().String())
	select {
	case <-l.settled:
	case <-l.done:
		c.end(net.ErrClosed)
		return
	}
	if !l.takeOver(c) {
		c.end(net.ErrClosed)
		return
	}
	err := c.readRequests(nc)
	s.mu.Lock()
	inControl := s.ctrl == c && !l.closing
	s.releaseLocked(c, reasonConnEnded)
	if inControl && l.idle != nil {
		l.idle.Reset(l.o.IdleTimeout)
	}
	s.mu.Unlock()
	if errors.Is(err, ErrProtocol) {
		l.linger(nc)
	}
	c.end(io.EOF)
	switch {
	case !inControl:
		// Taken over (said so then), or ServeListener is returning.
	case err != nil:
		s.logf("supervisor: connection from %s ended: %v", c.peer, err)
	default:
		s.logf("supervisor: connection from %s closed", c.peer)
	}
}

// takeOver puts c in control, retiring the connection that was, and sends
// c its ready event before any other.
func (l *listener) takeOver(c *conn) bool {
	s := l.s
	workers, why := s.pool.status()
	c.outMu.Lock()
	defer c.outMu.Unlock()
	s.mu.Lock()
	if l.closing {
		s.mu.Unlock()
		return false
	}
	old := s.ctrl
	if old != nil {
		s.releaseLocked(old, reasonTakeover)
	}
	s.ctrl = c
	if l.idle != nil {
		l.idle.Stop()
	}
	s.mu.Unlock()
	if old != nil {
		s.logf("supervisor: connection from %s took over from %s", c.peer, old.peer)
		go old.retire()
	} else {
		s.logf("supervisor: connection from %s in control", c.peer)
	}
	c.sendLocked(Event{Ev: EvReady, PID: s.self, Workers: workers, Error: why, Version: Version})
	return true
}

// linger sends the end of what nc had to say after a broken frame to
// nowhere for a moment, before nc is closed: closing it with input unread
// would reset it, and its peer might lose the error event that says why.
func (l *listener) linger(nc net.Conn) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = nc.SetReadDeadline(time.Now().Add(retireTimeout))
	_, _ = io.Copy(io.Discard, io.LimitReader(nc, lingerLimit))
}

// forget drops a closed nc.
func (l *listener) forget(nc net.Conn) {
	l.mu.Lock()
	delete(l.conns, nc)
	l.mu.Unlock()
}

// refused logs why the connection from addr was refused, at most
// refusalBurst lines a refusalWindow: a flood is counted, not logged line by
// line.
func (l *listener) refused(addr net.Addr, err error) {
	l.mu.Lock()
	now := time.Now()
	skipped := 0
	if now.Sub(l.logAt) >= refusalWindow {
		skipped = l.skipped
		l.logAt, l.logged, l.skipped = now, 0, 0
	}
	log := l.logged < refusalBurst
	if log {
		l.logged++
	} else {
		l.skipped++
	}
	l.mu.Unlock()
	if skipped > 0 {
		l.s.logf("supervisor: %d more connections refused in the last %s (not logged one by one)", skipped, refusalWindow)
	}
	if log {
		l.s.logf("supervisor: refused a connection from %s: %v", addr, err)
	}
}

// close stops accepting, ends every connection and waits for their
// goroutines.
func (l *listener) close() {
	l.s.mu.Lock()
	l.closing = true
	if l.idle != nil {
		l.idle.Stop()
	}
	l.s.mu.Unlock()
	close(l.done)
	l.ln.Close()
	l.mu.Lock()
	l.closed = true
	for nc := range l.conns {
		nc.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
