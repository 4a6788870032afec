package egress

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// What a sandbox may make the proxy hold. Every byte the sandbox sends is
// either streamed on or part of a head read under MaxHeadBytes; every
// connection is closed once it has carried nothing for IdleTimeout; the
// connections open at once are capped per run (MaxConcurrent). So one
// run's proxy holds at most about MaxConcurrent × (MaxHeadBytes + buffers)
// of the daemon's memory, whatever the script sends.
const (
	// DefaultMaxHeadBytes bounds a request head read from the sandbox (the
	// request line and headers).
	DefaultMaxHeadBytes = 64 << 10
	// maxResponseHeadBytes bounds a response head read from upstream
	// (larger: cookies).
	maxResponseHeadBytes = 256 << 10
	// DefaultHeadTimeout bounds reading a request head (and a TLS
	// handshake with the sandbox).
	DefaultHeadTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a connection that carried nothing either
	// way for that long.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConcurrent caps the connections a run holds open to the
	// proxy at once, over all its ports; more are refused.
	DefaultMaxConcurrent = 64
)

// LimitConcurrent is the Limit of an attempt refused because the run held
// MaxConcurrent connections already (it does not end the run).
const LimitConcurrent = "egress_concurrent"

// errHeadTooLarge is what a headLimit returns past its budget.
var errHeadTooLarge = errors.New("request head too large")

// headLimit lets at most n bytes through while a head is read (limit),
// then any number (unlimit), so that a head cannot grow without end while
// a body streams. A Read past the budget fails with errHeadTooLarge.
type headLimit struct {
	r   io.Reader
	on  bool
	n   int64
	hit bool
}

func (h *headLimit) Read(b []byte) (int, error) {
	if !h.on {
		return h.r.Read(b)
	}
	if h.n <= 0 {
		h.hit = true
		return 0, errHeadTooLarge
	}
	if int64(len(b)) > h.n {
		b = b[:h.n]
	}
	n, err := h.r.Read(b)
	h.n -= int64(n)
	return n, err
}

// limit starts a head: at most n more bytes.
func (h *headLimit) limit(n int64) { h.on, h.n, h.hit = true, n, false }

// unlimit ends a head: what follows is a body, streamed.
func (h *headLimit) unlimit() { h.on = false }

// clientConn is a connection from the sandbox to the proxy. It counts as
// one of the run's concurrent connections until closed, notes when it last
// carried bytes (either way, and on the upstream connections attached to
// it) so the reaper can close it when idle, and is closed at Shutdown.
type clientConn struct {
	net.Conn
	p        *Proxy
	last     atomic.Int64 // unix nanoseconds of the last byte either way
	read     atomic.Int64 // bytes read from the sandbox
	once     sync.Once
	mu       sync.Mutex
	attached []io.Closer
	// For the plain proxy's server (see connState): the bytes read when
	// the connection last waited for a request, and whether the handler
	// ran for the request since.
	mark    int64
	handled atomic.Bool
	active  bool
}

func (c *clientConn) touch() { c.last.Store(time.Now().UnixNano()) }

func (c *clientConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.read.Add(int64(n))
		c.touch()
	}
	return n, err
}

func (c *clientConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.touch()
	}
	return n, err
}

// Close closes the connection and what is attached to it, and gives its
// place back to the run.
func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.mu.Lock()
		att := c.attached
		c.attached = nil
		c.mu.Unlock()
		for _, a := range att {
			a.Close()
		}
		c.p.release(c)
	})
	return err
}

// attach closes up with c (an upstream connection serving it).
func (c *clientConn) attach(up io.Closer) {
	c.mu.Lock()
	c.attached = append(c.attached, up)
	c.mu.Unlock()
}

// capListener admits at most MaxConcurrent connections of the run at
// once (over all its listeners); one over is closed at once and reported.
type capListener struct {
	net.Listener
	p    *Proxy
	kind string
	port uint16
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if cc := l.p.admit(c); cc != nil {
			return cc, nil
		}
		c.Close()
		a := Attempt{Kind: l.kind, Port: l.port, Rule: "none", Limit: LimitConcurrent,
			Reason: fmt.Sprintf("the run already holds %d connections to the proxy: connection refused", l.p.cfg.MaxConcurrent)}
		l.p.reporter(&a, time.Now())()
	}
}

// listen wraps l so that its connections count against the run's cap.
func (p *Proxy) listen(l net.Listener, kind string, port uint16) net.Listener {
	return &capListener{Listener: l, p: p, kind: kind, port: port}
}

// admit takes a place for c, or returns nil when the run holds its cap
// (or is shutting down).
func (p *Proxy) admit(c net.Conn) *clientConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.clients) >= p.cfg.MaxConcurrent {
		return nil
	}
	cc := &clientConn{Conn: c, p: p}
	cc.touch()
	p.clients[cc] = struct{}{}
	return cc
}

func (p *Proxy) release(c *clientConn) {
	p.mu.Lock()
	delete(p.clients, c)
	p.mu.Unlock()
}

// reap closes, every tick until stop, the connections idle for longer
// than IdleTimeout: a sandbox cannot hold the proxy's goroutines and
// buffers by going silent (upstream silent too).
func (p *Proxy) reap() {
	tick := p.cfg.IdleTimeout / 4
	if tick > 5*time.Second {
		tick = 5 * time.Second
	}
	if tick < 10*time.Millisecond {
		tick = 10 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-p.stopReap:
			return
		case now := <-t.C:
			var idle []*clientConn
			p.mu.Lock()
			for c := range p.clients {
				if now.Sub(time.Unix(0, c.last.Load())) > p.cfg.IdleTimeout {
					idle = append(idle, c)
				}
			}
			p.mu.Unlock()
			for _, c := range idle {
				c.Close()
			}
		}
	}
}
