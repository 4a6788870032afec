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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/span"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/connlimit"
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

// CallError describes one failed or refused call for
// ServerOptions.OnCallError. The byte slices are only valid during the hook.
type CallError struct {
	ConnID uint64
	Peer   api.Peer
	// ID is the request id as sent (a JSON string, number or null); nil for
	// a notification or when the line could not be read that far.
	ID json.RawMessage
	// Method is the method asked for; "" when the request could not be
	// decoded that far (for an over-long line it is taken from the line's
	// start when it is there).
	Method string
	// Params is the raw params of a decoded request (nil when absent).
	Params json.RawMessage
	// Line is the request line of a request that could not be decoded
	// (parse error, invalid request), or the start of an over-long line
	// (at most 4 KiB); LineBytes is the whole line's length, newline not
	// counted. Both are zero for decoded requests.
	Line      []byte
	LineBytes int
	// Err is the handler's error (nil for the transport's own refusals);
	// callers may look for markers in it with errors.Is/As.
	Err error
	// Resp is the error the client is told (or would be, for a
	// notification).
	Resp *Error
}

// Handler serves one method. ctx is cancelled when the call should stop (see
// context.Cause for why: ErrClientGone, ErrCallCancelled, ErrShuttingDown).
// The result is marshalled with encoding/json as the response's result; an
// error becomes the response's error through ToRPCError. Handlers run
// concurrently, also for one connection, and must honour ctx.
type Handler func(ctx context.Context, call *Call) (any, error)

// Call is one request as a handler sees it.
type Call struct {
	// ID is the request id exactly as the client sent it (a JSON string,
	// number or null); nil for a notification, which gets no response.
	ID json.RawMessage
	// Method is the method name, e.g. "skills.run_script".
	Method string
	// Params is the raw params value (an object or array), nil when absent
	// or null. Use Bind to decode it.
	Params json.RawMessage
	// Peer is the kernel-reported identity of the connecting process.
	Peer api.Peer
	// ConnID numbers connections from 1 in accept order; the audit log and
	// the daemon's log use it to tie calls to a connection.
	ConnID uint64

	conn     *conn // nil for calls made outside a connection (tests)
	notified atomic.Bool
}

// TryNotify queues a notification (a request without id) to the call's
// client without waiting: it reports false, sending nothing, when the
// connection's queue of notifications is full because the client reads
// slowly. Notifications of a call are written before its response.
func (c *Call) TryNotify(method string, params any) bool {
	if c.conn == nil {
		return false
	}
	line, err := marshalNotification(method, params)
	if err != nil {
		c.conn.log.Error("cannot marshal notification", "method", method, "error", err)
		return false
	}
	c.notified.Store(true)
	select {
	case c.conn.notes <- note{line: line}:
		return true
	default:
		return false
	}
}

// Notify queues a notification, waiting for room until ctx is done or the
// connection closes (a client that stops reading is disconnected after
// WriteTimeout).
func (c *Call) Notify(ctx context.Context, method string, params any) error {
	if c.conn == nil {
		return nil
	}
	line, err := marshalNotification(method, params)
	if err != nil {
		return err
	}
	c.notified.Store(true)
	return c.conn.enqueue(ctx, note{line: line})
}

// IsNotification reports whether the call expects no response.
func (c *Call) IsNotification() bool { return c.ID == nil }

// Bind decodes the params into v strictly: unknown fields are rejected (a
// misspelt "sesion_id" should be an error that names it, not a silently
// missing session), absent or null params decode as {}. Errors wrap
// api.ErrInvalidParams and say which field is wrong.
func (c *Call) Bind(v any) error {
	p := []byte(c.Params)
	if len(p) == 0 || string(p) == "null" {
		p = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid params for %s: %s: %w", c.Method, describeJSONError(err), api.ErrInvalidParams)
	}
	if dec.More() {
		return fmt.Errorf("invalid params for %s: trailing data after the params value: %w", c.Method, api.ErrInvalidParams)
	}
	return nil
}

// describeJSONError rewords encoding/json errors for a reader who sent JSON,
// not Go.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, not a JSON %s", te.Field, jsonTypeName(te.Type.String()), te.Value)
		}
		return fmt.Sprintf("params must be %s, not a JSON %s", jsonTypeName(te.Type.String()), te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func jsonTypeName(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"), strings.HasPrefix(goType, "float"):
		return "a number"
	case strings.HasPrefix(goType, "[]uint8"):
		return "a base64 string"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "an object"
	}
	return "a " + goType
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

// note is a queued notification line, or (done set) a barrier that
// writeNotes closes once every line queued before it is written.
type note struct {
	line []byte
	done chan struct{}
}

// enqueue waits for room in the notification queue.
func (c *conn) enqueue(ctx context.Context, n note) error {
	select {
	case c.notes <- n:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return context.Cause(c.ctx)
	}
}

// writeNotes writes queued notifications until the connection ends. It is
// the only goroutine that waits for a slow client to read notifications,
// so neither the calls that emit them nor other connections wait.
func (c *conn) writeNotes() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case n := <-c.notes:
			if n.done != nil {
				close(n.done)
				continue
			}
			c.writeLine(n.line)
		}
	}
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

// dispatch decodes one line and starts its call; it runs on the reader
// goroutine, so decoding is synchronous and c.buf may be reused afterwards.
func (c *conn) dispatch(line []byte) {
	line = trimJSONSpace(line)
	if len(line) == 0 {
		return // blank lines are allowed as keep-alives
	}
	req, errID, rerr := decodeRequest(line)
	if rerr != nil {
		c.log.Debug("bad request", "error", rerr.Message)
		c.callError(&CallError{ID: errID, Method: req.Method, Line: line, LineBytes: len(line), Resp: rerr})
		c.writeError(errID, rerr)
		return
	}
	if req.Method == MethodCancel {
		c.cancelCall(req)
		return
	}
	refuse := func(e *Error) {
		c.callError(&CallError{ID: req.ID, Method: req.Method, Params: req.Params, Resp: e})
		if req.ID != nil {
			c.writeError(req.ID, e)
		}
	}
	h := c.s.Handler(req.Method)
	if h == nil {
		refuse(methodNotFound(req.Method, c.s.Methods()))
		return
	}
	key := string(req.ID)
	if req.ID != nil {
		c.imu.Lock()
		_, dup := c.inflight[key]
		c.imu.Unlock()
		if dup {
			refuse(&Error{Code: CodeInvalidRequest, Kind: api.KindInvalidParams,
				Message: fmt.Sprintf("id %s is already used by a call in flight on this connection; use a new id per request", key)})
			return
		}
	}
	// The call keeps the line's bytes accounted until it ends.
	size, held := int64(len(line)), c.held
	c.held = 0
	release := func() { c.s.releaseBytes(c.peer.UID, held) }
	// Backpressure: wait for a free call slot rather than failing the call.
	select {
	case c.sem <- struct{}{}:
	case <-c.ctx.Done():
		release()
		return
	}
	s := c.s
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-c.sem
		release()
		refuse(ToRPCError(ErrShuttingDown))
		return
	}
	s.calls.Add(1)
	s.mu.Unlock()

	ctx, cancel := context.WithCancelCause(c.ctx)
	if req.ID != nil {
		c.imu.Lock()
		c.inflight[key] = cancel
		c.imu.Unlock()
	}
	c.active.Add(1)
	c.calls.Add(1)
	call := &Call{ID: req.ID, Method: req.Method, Params: req.Params, Peer: c.peer, ConnID: c.id, conn: c}
	go func() {
		c.run(ctx, cancel, h, call)
		release()
		if size >= bigRequest {
			c.s.returnMemory()
		}
	}()
}

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

// run executes one call and writes its response.
func (c *conn) run(ctx context.Context, cancel context.CancelCauseFunc, h Handler, call *Call) {
	defer c.s.calls.Done()
	defer c.calls.Done()
	start := time.Now()
	var sp trace.Span
	if t := c.s.opts.Tracer; t != nil {
		ctx, sp = t.Start(ctx, call.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("rpc.system", "jsonrpc"), attribute.String("rpc.method", call.Method)))
	}
	result, err := c.invoke(ctx, h, call)

	// Free the id and the slot before answering, so a client may reuse the
	// id as soon as it has read the response.
	if call.ID != nil {
		c.imu.Lock()
		delete(c.inflight, string(call.ID))
		c.imu.Unlock()
	}
	cancel(nil)
	c.active.Add(-1)
	<-c.sem

	var rerr *Error
	herr := err // as the handler returned it, for OnCallError
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Say why the call stopped, not just "context canceled".
			err = fmt.Errorf("%s stopped: %w", call.Method, context.Cause(ctx))
		}
		rerr = ToRPCError(err)
		lvl := hclog.Debug
		if rerr.Kind == api.KindInternal {
			lvl = hclog.Error
		}
		c.log.Log(lvl, "call failed", "method", call.Method, "kind", rerr.Kind, "error", err, "duration", time.Since(start))
	} else {
		c.log.Trace("call done", "method", call.Method, "duration", time.Since(start))
	}
	var raw json.RawMessage
	if rerr == nil && call.ID != nil {
		raw, err = json.Marshal(result)
		if err != nil {
			c.log.Error("cannot marshal result", "method", call.Method, "error", err)
			herr = err
			rerr = &Error{Code: CodeInternal, Kind: api.KindInternal,
				Message: fmt.Sprintf("internal error: the result of %s could not be encoded", call.Method)}
		}
	}
	if rerr != nil {
		c.callError(&CallError{ID: call.ID, Method: call.Method, Params: call.Params, Err: herr, Resp: rerr})
	}
	if sp != nil {
		var kind string
		if rerr != nil {
			kind = rerr.Kind
		}
		span.End(sp, herr, kind)
	}
	if call.notified.Load() {
		// Its notifications go out before the response.
		done := make(chan struct{})
		if c.enqueue(context.Background(), note{done: done}) == nil {
			select {
			case <-done:
			case <-c.ctx.Done():
			}
		}
	}
	if call.ID == nil {
		return
	}
	c.write(call.ID, raw, rerr)
}

// callError tells OnCallError about a refused or failed call.
func (c *conn) callError(ce *CallError) {
	f := c.s.opts.OnCallError
	if f == nil {
		return
	}
	ce.ConnID, ce.Peer = c.id, c.peer
	c.hook("OnCallError", func() { f(ce) })
}

// hook runs a ServerOptions hook, turning a panic into a log line: a bug in
// a hook must not take the daemon down.
func (c *conn) hook(name string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("hook panicked", "hook", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	f()
}

// invoke calls h, turning a panic into an internal error.
func (c *conn) invoke(ctx context.Context, h Handler, call *Call) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("handler panicked", "method", call.Method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			result = nil
			err = &Error{Code: CodeInternal, Kind: api.KindInternal,
				Message: fmt.Sprintf("internal error in %s; the daemon logged the details", call.Method)}
		}
	}()
	return h(ctx, call)
}

// cancelCall serves rpc.cancel.
func (c *conn) cancelCall(req request) {
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	found := false
	if err := json.Unmarshal(req.Params, &p); err == nil && len(p.ID) > 0 {
		c.imu.Lock()
		cancel, ok := c.inflight[string(p.ID)]
		c.imu.Unlock()
		if ok {
			cancel(ErrCallCancelled)
			found = true
		}
	}
	if req.ID != nil {
		c.write(req.ID, json.RawMessage(fmt.Sprintf(`{"cancelled":%t}`, found)), nil)
	}
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

// marshalNotification builds one notification line (with its newline).
func marshalNotification(method string, params any) ([]byte, error) {
	b, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", method, params})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// marshalResponse builds one response line (with its newline).
func marshalResponse(id, result json.RawMessage, e *Error) ([]byte, error) {
	if id == nil {
		id = json.RawMessage("null")
	}
	var v any
	if e != nil {
		v = struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   *Error          `json:"error"`
		}{"2.0", id, e}
	} else {
		if result == nil {
			result = json.RawMessage("null")
		}
		v = struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Result  json.RawMessage `json:"result"`
		}{"2.0", id, result}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// request is a decoded, valid request.
type request struct {
	ID     json.RawMessage // nil: notification
	Method string
	Params json.RawMessage // nil: absent or null
}

// decodeRequest parses one line. On failure it returns the error to send and
// the id to send it with (nil → null: the id could not be determined), and a
// request holding the method when the line named one (for the audit).
// Member names match exactly (encoding/json alone would also accept "ID" or
// "Method"); members other than jsonrpc, id, method and params are ignored.
func decodeRequest(line []byte) (request, json.RawMessage, *Error) {
	line = trimJSONSpace(line)
	var partial request // what is known of a refused request
	invalid := func(id json.RawMessage, format string, args ...any) (request, json.RawMessage, *Error) {
		return partial, id, &Error{Code: CodeInvalidRequest, Kind: api.KindInvalidParams, Message: "invalid request: " + fmt.Sprintf(format, args...)}
	}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		msg := "the line is not valid JSON"
		if err != nil {
			msg += ": " + describeJSONError(err)
		}
		return request{}, nil, &Error{Code: CodeParseError, Kind: api.KindInvalidParams,
			Message: "parse error: " + msg + "; send one JSON-RPC request object per line"}
	}
	if len(line) > 0 && line[0] == '[' {
		return invalid(nil, "batch requests (arrays) are not supported; send one request object per line")
	}
	if len(line) == 0 || line[0] != '{' {
		return invalid(nil, "a request must be a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil || m == nil {
		return invalid(nil, "a request must be a JSON object")
	}
	if where, name, dup := api.DuplicateKey(line); dup {
		if raw, ok := m["method"]; ok && len(raw) > 0 && raw[0] == '"' {
			json.Unmarshal(raw, &partial.Method)
		}
		// Echo the id only when it was not itself repeated.
		var id json.RawMessage
		if raw, ok := m["id"]; ok && validID(raw) && (where != "" || !strings.EqualFold(name, "id")) {
			id = raw
		}
		if where == "" {
			return invalid(id, "member %q appears twice (names are compared ignoring case); send each member once", name)
		}
		return partial, id, &Error{Code: CodeInvalidParams, Kind: api.KindInvalidParams,
			Message: fmt.Sprintf("invalid params: key %q appears twice in %s (keys are compared ignoring case, as fields are matched); send each key once", name, where)}
	}
	if raw, ok := m["method"]; ok && len(raw) > 0 && raw[0] == '"' {
		json.Unmarshal(raw, &partial.Method)
	}
	var id json.RawMessage
	if raw, ok := m["id"]; ok {
		if !validID(raw) {
			return invalid(nil, "id must be a string (valid UTF-8), a number or null")
		}
		id = raw
	}
	var version string
	if raw, ok := m["jsonrpc"]; !ok || json.Unmarshal(raw, &version) != nil || version != "2.0" {
		return invalid(id, `"jsonrpc" must be "2.0"`)
	}
	var method string
	raw, ok := m["method"]
	if !ok {
		return invalid(id, `"method" is missing`)
	}
	if raw[0] != '"' || json.Unmarshal(raw, &method) != nil {
		return invalid(id, `"method" must be a string`)
	}
	if method == "" {
		return invalid(id, `"method" is empty`)
	}
	var params json.RawMessage
	if raw, ok := m["params"]; ok && string(raw) != "null" {
		if raw[0] != '{' && raw[0] != '[' {
			return invalid(id, `"params" must be an object`)
		}
		params = raw
	}
	return request{ID: id, Method: method, Params: params}, id, nil
}

// validID reports whether raw (valid JSON) is a string, number or null.
func validID(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	switch b := raw[0]; {
	case b == '"':
		// Echoed back as sent: it must be valid UTF-8 without raw
		// control characters (json.Valid lets invalid UTF-8 through).
		return utf8.Valid(raw)
	case b == '-', b >= '0' && b <= '9':
		return true
	case b == 'n':
		return string(raw) == "null"
	}
	return false
}

// peekID finds a top-level "id" in the start of a (possibly cut off) request
// object; nil when there is none before the cut.
func peekID(prefix []byte) json.RawMessage {
	if v := peekMember(prefix, "id"); validID(v) {
		return v
	}
	return nil
}

// peekMethod finds a top-level string "method" in the start of a (possibly
// cut off) request object; "" when there is none before the cut.
func peekMethod(prefix []byte) string {
	var m string
	if v := peekMember(prefix, "method"); len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &m) == nil {
		return m
	}
	return ""
}

// peekMember returns the value of the first top-level member named key in
// the start of a (possibly cut off) JSON object; nil when it is not there
// before the cut.
func peekMember(prefix []byte, key string) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if k, _ := tok.(string); k == key {
			return v
		}
	}
	return nil
}

func trimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\r\n")
}

// methodNotFound builds the -32601 error, naming the closest methods so a
// model that misspelt one can correct itself.
func methodNotFound(method string, known []string) *Error {
	type cand struct {
		name string
		d    int
	}
	var close []cand
	for _, k := range known {
		d := editDistance(strings.ToLower(method), strings.ToLower(k))
		if d <= max(2, len(k)/3) || strings.HasSuffix(k, "."+method) {
			close = append(close, cand{k, d})
		}
	}
	sort.SliceStable(close, func(i, j int) bool { return close[i].d < close[j].d })
	if len(close) > 3 {
		close = close[:3]
	}
	names := make([]string, len(close))
	for i, c := range close {
		names[i] = c.name
	}
	e := &Error{Code: CodeMethodNotFound, Kind: api.KindNotFound}
	switch {
	case len(names) > 0:
		e.Message = fmt.Sprintf("unknown method %q; did you mean %s?", method, quoteJoin(names))
		e.Data = map[string]any{"methods": names}
	case len(known) > 0:
		e.Message = fmt.Sprintf("unknown method %q; the methods are %s", method, quoteJoin(known))
		e.Data = map[string]any{"methods": known}
	default:
		e.Message = fmt.Sprintf("unknown method %q; this server has no methods", method)
	}
	return e
}

func quoteJoin(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// editDistance is the Levenshtein distance over bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
