package connlimit

import (
	"net"
	"strconv"
	"sync"
	"time"
)

// Peer identifies a connection's peer: its uid and whether the kernel
// reported one (false for loopback TCP). It runs in the accept loop, so it
// must be cheap (a getsockopt, no file reads).
type Peer func(c net.Conn) (uid uint32, known bool)

// Listener is a net.Listener whose Accept returns only connections its
// Limiter took: any other is answered with Refuse (when set) and closed
// at once, and Accept goes on to the next. The connections it returns
// release their count when closed, and give their own net.Conn back from
// NetConn, so peer credentials can still be read from them.
type Listener struct {
	net.Listener
	limiter *Limiter
	peer    Peer
	// Privileged, when set, says whether a uid may use the reserve and is
	// exempt from the per-uid cap; it is asked only for a connection a cap
	// would otherwise refuse.
	Privileged func(uid uint32) bool
	// Refuse, when set, writes a refusal to a connection that will be
	// closed (an HTTP 503, say). It must not block: the connection has a
	// write deadline of RefuseTimeout.
	Refuse func(c net.Conn, err *RefusedError)
	// Refused, when set, is told of every refusal before the connection
	// is answered and closed (for the audit and logs); it must not block.
	Refused func(c net.Conn, err *RefusedError)
}

// RefuseTimeout bounds the write of a refusal, so a peer that does not read
// never holds Accept.
const RefuseTimeout = 50 * time.Millisecond

// NewListener wraps ln: every connection it accepts is counted by limiter
// for the peer that peer names.
func NewListener(ln net.Listener, limiter *Limiter, peer Peer) *Listener {
	return &Listener{Listener: ln, limiter: limiter, peer: peer}
}

// Accept waits for the next connection the limiter takes.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, known := l.peer(c)
		var privileged func() bool
		if known && l.Privileged != nil {
			privileged = func() bool { return l.Privileged(uid) }
		}
		release, err := l.limiter.Acquire(uid, known, privileged)
		if err != nil {
			re := err.(*RefusedError)
			if l.Refused != nil {
				l.Refused(c, re)
			}
			if l.Refuse != nil {
				c.SetWriteDeadline(time.Now().Add(RefuseTimeout))
				l.Refuse(c, re)
			}
			c.Close()
			continue
		}
		return &conn{Conn: c, release: release}, nil
	}
}

// conn is a counted connection.
type conn struct {
	net.Conn
	release func()
	once    sync.Once
	err     error
}

// Close closes the connection and releases its count, once.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.err = c.Conn.Close()
		c.release()
	})
	return c.err
}

// NetConn returns the connection the listener accepted (as tls.Conn does),
// for reading its peer credentials.
func (c *conn) NetConn() net.Conn { return c.Conn }

// HTTPRefusal writes a 503 answer naming the cap, for HTTP listeners.
func HTTPRefusal(c net.Conn, err *RefusedError) {
	msg := "skillbox: " + err.Error() + "\n"
	c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: " + strconv.Itoa(len(msg)) + "\r\n\r\n" + msg))
}

// Timeouts and sizes for an HTTP server on a capped listener: a peer that
// is slow to send its request head (slowloris), sends none (a half-open
// connection) or idles between requests is dropped soon, so a held
// connection keeps its place under the cap only briefly. Streams the
// server answers with (the console's events) are not bounded by them.
const (
	HeaderTimeout  = 5 * time.Second
	IdleTimeout    = 30 * time.Second
	MaxHeaderBytes = 64 << 10
)
