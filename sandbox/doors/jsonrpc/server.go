package jsonrpc

// The JSON-RPC 2.0 transport: hosts talk to the daemon over a Unix stream
// socket, one JSON object per line in each direction. The transport knows
// nothing about skills; handlers registered with Server.Handle do the work.
//
// What it guarantees to handlers, and why:
//
//   - Every Call carries the kernel-reported Peer (SO_PEERCRED), so handlers
//     authorize on who the caller really is, never on what it claims.
//   - Calls on one connection run concurrently, each in its own goroutine, and
//     responses go out as whole lines under a write lock, possibly out of
//     order (clients match them by id). A slow run_script does not hold up a
//     quick skills.read from the same host.
//   - A call's ctx is cancelled when the client goes away (closes the socket),
//     cancels the call (the "rpc.cancel" notification), or the daemon shuts
//     down, so a run in flight is killed rather than left orphaned. A client
//     that only half-closes (shutdown(SHUT_WR), as `socat` and `nc -N` do)
//     still gets its answers.
//   - Nothing a client sends can take the daemon down: lines are size-capped,
//     a started line must complete within LineTimeout (no slowloris), idle
//     connections are dropped, writes to a client that stops reading time
//     out, a handler panic becomes an internal error, and the number of
//     connections and of calls in flight per connection is bounded.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/connlimit"
)

// Defaults for ServerOptions fields left zero.
const (
	DefaultMaxConnections  = 128
	DefaultMaxLineBytes    = 1 << 20
	DefaultMaxCallsPerConn = 32
	DefaultIdleTimeout     = 15 * time.Minute
	DefaultLineTimeout     = 30 * time.Second
	DefaultWriteTimeout    = 30 * time.Second
	// DefaultNotificationQueue bounds the notifications waiting to be
	// written to one connection.
	DefaultNotificationQueue = 256
)

// MethodCancel is the built-in notification a client sends to cancel one of
// its own calls in flight on the same connection: {"id": <the call's id>}.
// JSON-RPC reserves the "rpc." prefix for such extensions, so handlers cannot
// be registered under it. Sent as a request (with an id), it answers
// {"cancelled": true|false}.
const MethodCancel = "rpc.cancel"

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("skillbox rpc server closed")

// Errors used as the cancellation cause of a call's ctx (context.Cause), so
// a handler (and the log) can tell why it was stopped.
var (
	ErrClientGone      = fmt.Errorf("the client closed its connection: %w", api.ErrUnavailable)
	ErrCallCancelled   = fmt.Errorf("the client cancelled the call: %w", api.ErrUnavailable)
	ErrShuttingDown    = fmt.Errorf("skillbox is shutting down; retry once it is back: %w", api.ErrUnavailable)
	errWriteFailed     = fmt.Errorf("writing to the client failed: %w", api.ErrUnavailable)
	errTooManyConns    = fmt.Errorf("too many connections to skillbox; close idle ones or retry later: %w", api.ErrUnavailable)
	errPeerCredentials = errors.New("peer credentials unreadable")
)

// ServerOptions configure a Server. Zero values take the defaults above; a
// negative timeout disables that timeout.
type ServerOptions struct {
	// MaxConnections bounds open client connections. One more is answered
	// with a single "unavailable" error line (id null) and closed.
	MaxConnections int
	// MaxLineBytes bounds one request line (without its newline). A longer
	// line is read to its end and discarded without being buffered, answered
	// with an invalid-request error (-32600) and, when the id could be read
	// from the line's start, that id (the Go client writes the id before the
	// params for this reason); the connection stays usable, so other calls in
	// flight on it are not lost.
	MaxLineBytes int
	// MaxCallsPerConn bounds calls in flight on one connection. When it is
	// reached the server stops reading that connection until one finishes
	// (backpressure), instead of failing calls.
	MaxCallsPerConn int
	// IdleTimeout closes a connection that has no call in flight and sends
	// no new request for this long. Connections with a call in flight are
	// never idle.
	IdleTimeout time.Duration
	// LineTimeout bounds how long a request line may take to arrive once its
	// first byte has, so a client that trickles bytes (slowloris) is dropped.
	LineTimeout time.Duration
	// WriteTimeout bounds writing one response; a client that does not read
	// its responses is disconnected (and its calls cancelled).
	WriteTimeout time.Duration
	// NotificationQueue bounds the notifications (run output while a
	// script runs) waiting to be written to one connection; when it is
	// full, further ones are dropped (Call.TryNotify) rather than slowing
	// the run or anyone else down.
	NotificationQueue int
	// Logger receives transport events; the server names it "rpc".
	Logger hclog.Logger
	// Authorize, when set, decides whether a peer may use the socket at all
	// (beyond the socket file's mode). A non-nil error refuses the connection:
	// the client gets one "denied" error line with the error's message.
	Authorize func(api.Peer) error
	// OnAuthRefused is told about every refused connection: credentials that
	// could not be read (Peer is zero then) or an Authorize refusal. The
	// daemon audits these. It must not block.
	OnAuthRefused func(p api.Peer, reason string)
	// OnCallError is told about every call that ends in an error: the
	// transport's own refusals (a line that is not JSON, an invalid request,
	// an unknown method, an over-long line, a duplicate id, a call during
	// shutdown) and every handler error. It runs before the error response
	// is written, so whatever it records precedes the answer, and also for
	// notifications, which get no answer. It may run concurrently for one
	// connection (on its reader and on its calls' goroutines); it should not
	// block for long, since the connection's answers wait for it. A panic in
	// it is logged and swallowed. The daemon audits these calls.
	OnCallError func(*CallError)
	// MaxConnsPerUID bounds the open connections of one uid (0: no bound
	// beyond MaxConnections); privileged peers are not bound by it.
	MaxConnsPerUID int
	// ReservedConns of MaxConnections are kept for privileged peers (the
	// daemon's approvers), so a flood of other connections never locks
	// them out.
	ReservedConns int
	// Privileged tells whether a peer may use the reserve and is exempt
	// from MaxConnsPerUID (nil: nobody is).
	Privileged func(api.Peer) bool
	// MaxRequestBytesPerUID bounds the bytes of request lines of one uid
	// whose calls are in flight, over all its connections (0: no bound).
	// A call over it is refused (limit_exceeded) rather than held.
	MaxRequestBytesPerUID int64
	// OnConnRefused is told about every connection turned away for a
	// limit (the daemon audits them, aggregated). It must not block.
	OnConnRefused func(p api.Peer, reason string)
	// OnConnClosed is told when a connection that was being served ends,
	// after all its calls (and their OnCallError hooks) have returned. Peer
	// is zero when the credentials could not be read.
	OnConnClosed func(connID uint64, p api.Peer)
	// Tracer, when set (daemon.traces), starts one root span per call,
	// named by its method (only registered methods reach a handler, so
	// the names are bounded); the call's work runs in its context.
	Tracer trace.Tracer
}

// Server is the JSON-RPC server. Register handlers with Handle, then Serve
// one or more listeners; stop with Shutdown.
type Server struct {
	opts ServerOptions
	log  hclog.Logger

	mu        sync.Mutex
	handlers  map[string]Handler
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	conncap   *connlimit.Limiter // open connections, per uid and in all
	reqBytes  map[uint32]int64   // request bytes of calls in flight by uid
	closing   bool
	// calls counts calls in flight server-wide, connWG connection
	// goroutines; both are only Add-ed under mu while !closing, which is
	// what makes Shutdown's Wait safe.
	calls  sync.WaitGroup
	connWG sync.WaitGroup

	nextConnID atomic.Uint64
	lastFree   atomic.Int64 // unix nanos of the last returnMemory
}

// NewServer returns a server with no handlers.
func NewServer(opts ServerOptions) *Server {
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	if opts.MaxCallsPerConn <= 0 {
		opts.MaxCallsPerConn = DefaultMaxCallsPerConn
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.LineTimeout == 0 {
		opts.LineTimeout = DefaultLineTimeout
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.NotificationQueue <= 0 {
		opts.NotificationQueue = DefaultNotificationQueue
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Server{
		opts:      opts,
		log:       log.Named("rpc"),
		handlers:  map[string]Handler{},
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
		conncap:   connlimit.New(connlimit.Limits{Total: opts.MaxConnections, PerUID: opts.MaxConnsPerUID, Reserved: opts.ReservedConns}),
		reqBytes:  map[uint32]int64{},
	}
}

// Handle registers h for method. It panics on an empty or reserved ("rpc.")
// name, a nil handler or a duplicate: those are programming errors.
func (s *Server) Handle(method string, h Handler) {
	if method == "" || strings.HasPrefix(method, "rpc.") || h == nil {
		panic(fmt.Sprintf("jsonrpc: Handle(%q): invalid method name or nil handler", method))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.handlers[method]; dup {
		panic(fmt.Sprintf("jsonrpc: Handle(%q): method already registered", method))
	}
	s.handlers[method] = h
}

// Methods returns the registered method names, sorted.
func (s *Server) Methods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.handlers))
	for m := range s.handlers {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Handler returns the handler registered for method, or nil.
func (s *Server) Handler(method string) Handler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handlers[method]
}

// Serve accepts connections on ln until Shutdown (then it returns
// ErrServerClosed) or until ctx is done (a hard stop: ln is closed, every
// call is cancelled, and Serve returns ctx.Err() without waiting for the
// handlers; call Shutdown to wait for them). ln is closed when Serve returns.
// Connections that are not Unix sockets are refused, since they carry no
// peer credentials.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close() // done (and the socket file gone) before Serve returns

	s.log.Info("serving", "addr", ln.Addr().String())
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.isClosing() || errors.Is(err, net.ErrClosed) {
				return ErrServerClosed
			}
			if isTransientAcceptError(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "error", err, "backoff", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return fmt.Errorf("accept on %s: %w", ln.Addr(), err)
		}
		backoff = 0
		s.startConn(ctx, nc)
	}
}

func isTransientAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EINTR)
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// startConn registers nc and starts its goroutine, or turns it away. The
// peer's credentials are read first, so that the caps are per uid: one uid
// gets at most MaxConnsPerUID connections, and the last ReservedConns of
// MaxConnections only go to privileged peers.
func (s *Server) startConn(ctx context.Context, nc net.Conn) {
	id := s.nextConnID.Add(1)
	peer, perr := PeerCredentials(nc)
	var privileged func() bool
	if perr == nil && s.opts.Privileged != nil {
		privileged = func() bool { return s.opts.Privileged(peer) }
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		go s.reject(nc, ToRPCError(ErrShuttingDown))
		return
	}
	release, err := s.conncap.Acquire(peer.UID, perr == nil, privileged)
	if err != nil {
		var re *connlimit.RefusedError
		errors.As(err, &re)
		var refuse *Error
		if re.Scope == connlimit.ScopePerUID {
			refuse = ToRPCError(fmt.Errorf("uid %d already has %d connections open to skillbox (daemon.max_connections_per_uid); close idle ones or reuse one: %w", peer.UID, re.Open, api.ErrLimitExceeded))
		} else {
			refuse = ToRPCError(errTooManyConns)
		}
		refuse.Data = map[string]any{"limit": re.Limit}
		s.mu.Unlock()
		s.log.Debug("connection refused", "conn", id, "peer", peer.String(), "reason", refuse.Message)
		if s.opts.OnConnRefused != nil {
			s.opts.OnConnRefused(peer, refuse.Message)
		}
		go s.reject(nc, refuse)
		return
	}
	cctx, cancel := context.WithCancelCause(ctx)
	c := &conn{
		s:        s,
		id:       id,
		nc:       nc,
		ctx:      cctx,
		cancel:   cancel,
		inflight: map[string]context.CancelCauseFunc{},
		sem:      make(chan struct{}, s.opts.MaxCallsPerConn),
		notes:    make(chan note, s.opts.NotificationQueue),
		log:      s.log.With("conn", id),
		peer:     peer,
		peerErr:  perr,
		release:  release,
	}
	// Cancelling the conn (client gone, Shutdown, Serve's ctx) closes the
	// socket, which ends the reader.
	context.AfterFunc(cctx, func() { nc.Close() })
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	go c.serve()
	go c.writeNotes()
}

// reject writes one error line (id null) to a connection that will not be
// served, then closes it.
func (s *Server) reject(nc net.Conn, e *Error) {
	defer nc.Close()
	b, err := marshalResponse(nil, nil, e)
	if err != nil {
		return
	}
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	nc.Write(b)
}

// Shutdown stops the server gracefully: it stops accepting (closing the
// listeners, which for sockfile.Listen's listeners removes the socket file), answers
// new requests on open connections with "unavailable", and waits for the
// calls in flight to finish. When ctx is done first, it cancels the
// remaining calls (cause ErrShuttingDown). Either way it then closes every
// connection and waits for the handlers to return, giving them a short
// grace period after cancellation. It returns nil when every call finished
// on its own, ctx.Err() when calls had to be cancelled, or an error counting
// the calls still running after the grace period (handlers that ignore ctx).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	lns := make([]net.Listener, 0, len(s.listeners))
	for ln := range s.listeners {
		lns = append(lns, ln)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.log.Warn("closing listener", "addr", ln.Addr().String(), "error", err)
		}
	}

	var result error
	if !waitTimeout(&s.calls, ctx.Done()) {
		result = ctx.Err()
		s.log.Warn("shutdown deadline reached; cancelling calls in flight")
	}

	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(ErrShuttingDown)
	}
	graceCtx, cancelGrace := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancelGrace()
	if !waitTimeout(&s.connWG, graceCtx.Done()) {
		n := 0
		s.mu.Lock()
		for c := range s.conns {
			n += int(c.active.Load())
		}
		s.mu.Unlock()
		s.log.Error("handlers still running after cancellation", "calls", n)
		return fmt.Errorf("shutdown: %d calls still running %s after being cancelled", n, shutdownGrace)
	}
	return result
}

// shutdownGrace is how long Shutdown waits for cancelled handlers to return.
const shutdownGrace = 5 * time.Second

// waitTimeout waits for wg, or until done is closed; it reports whether wg
// finished.
func waitTimeout(wg *sync.WaitGroup, done <-chan struct{}) bool {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-done:
		// Prefer "finished" when both are ready.
		select {
		case <-ch:
			return true
		case <-time.After(10 * time.Millisecond):
			return false
		}
	}
}
