package supervisor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

var (
	// ErrStart is the kind of a run that did not start; the message says
	// why in words a model can act on ("python3: no such file in PATH").
	ErrStart = errors.New("run did not start")
	// ErrRefused is the kind of a request the supervisor answered with an
	// error (a signal for a run that ended, ...).
	ErrRefused = errors.New("supervisor refused")
	// ErrGone is the kind of every call after the supervisor's stdout
	// closed or the client was closed.
	ErrGone = errors.New("supervisor gone")
	// ErrVersion is the kind of NewConnClient's and Dial's error when the
	// supervisor speaks another protocol Version.
	ErrVersion = errors.New("supervisor protocol version mismatch")
)

// Client is the host's side of one supervisor: requests written to its
// stdin, events read from its stdout by one goroutine and handed to the
// call or run they belong to. After a restore the sandbox has new pipes,
// and the host makes a new Client over them; runs started through an
// earlier client report their exits through OnExit and are in List.
// Calls may be made concurrently.
type Client struct {
	w      io.WriteCloser
	wmu    sync.Mutex
	onExit func(id string, e Exit)
	// nc is the network connection of a client made by NewConnClient,
	// whose writes are bounded by writeTimeout.
	nc           net.Conn
	readyTimeout time.Duration
	writeTimeout time.Duration

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]chan Event
	runs    map[string]*Run
	hello   Hello
	ready   chan struct{}
	dead    chan struct{}
	err     error
	// collects are the streams of collects in flight (files_client.go).
	collects map[uint64]*collectStream
	said     string // the last error event no request asked for
}

// ClientOption sets an option of NewClient.
type ClientOption func(*Client)

// WithOnExit has f called with the exit of every run this client did not
// start (a background run started before a restore, through another
// client). f runs on the client's reader goroutine: it must not block.
func WithOnExit(f func(id string, e Exit)) ClientOption {
	return func(c *Client) { c.onExit = f }
}

// WithReadyTimeout bounds how long NewConnClient and Dial wait for the
// connection and the supervisor's ready event (0: DefaultReadyTimeout).
func WithReadyTimeout(d time.Duration) ClientOption {
	return func(c *Client) { c.readyTimeout = d }
}

// WithWriteTimeout bounds each request a client of NewConnClient or Dial
// writes (0: DefaultWriteTimeout); a supervisor that reads none for that
// long kills the client, not its caller's goroutine.
func WithWriteTimeout(d time.Duration) ClientOption {
	return func(c *Client) { c.writeTimeout = d }
}

// DefaultReadyTimeout is WithReadyTimeout's default: the supervisor's
// first ready event waits for its first python workers, up to 30 s.
const DefaultReadyTimeout = 45 * time.Second

// DefaultWriteTimeout is WithWriteTimeout's default.
const DefaultWriteTimeout = 30 * time.Second

// NewClient talks to a supervisor whose stdin is w and whose stdout is r.
func NewClient(w io.WriteCloser, r io.Reader, opts ...ClientOption) *Client {
	c := newClient(w, opts)
	go c.read(r)
	return c
}

func newClient(w io.WriteCloser, opts []ClientOption) *Client {
	c := &Client{
		w:            w,
		pending:      map[uint64]chan Event{},
		runs:         map[string]*Run{},
		ready:        make(chan struct{}),
		dead:         make(chan struct{}),
		collects:     map[uint64]*collectStream{},
		readyTimeout: DefaultReadyTimeout,
		writeTimeout: DefaultWriteTimeout,
	}
	for _, o := range opts {
		o(c)
	}
	if c.readyTimeout <= 0 {
		c.readyTimeout = DefaultReadyTimeout
	}
	if c.writeTimeout <= 0 {
		c.writeTimeout = DefaultWriteTimeout
	}
	return c
}

// Dial connects to a supervisor's listener (ServeListener) at addr, over
// TLS with tlsConfig (nil: plain TCP, for tests), and returns a client once
// the supervisor sent its ready event in the protocol Version this one
// speaks (else an ErrVersion error). The connection, its handshake and the
// ready event together take at most the ready timeout (WithReadyTimeout).
// The client takes over the supervisor: the connection that controlled it
// is closed, and its foreground runs are killed; background runs live on,
// and their exits go to this client's OnExit.
func Dial(ctx context.Context, network, addr string, tlsConfig *tls.Config, opts ...ClientOption) (*Client, error) {
	c := newClient(nil, opts)
	deadline := time.Now().Add(c.readyTimeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var nc net.Conn
	var err error
	if tlsConfig != nil {
		nc, err = (&tls.Dialer{Config: tlsConfig}).DialContext(dctx, network, addr)
	} else {
		nc, err = (&net.Dialer{}).DialContext(dctx, network, addr)
	}
	if err != nil {
		return nil, errkind.Errorf(ErrGone, "connect to the supervisor at %s: %w", addr, err)
	}
	c.w = nc
	return c.connect(ctx, nc, deadline)
}

// NewConnClient is a client over nc, a connection to a supervisor's
// listener (ServeListener): it waits for the ready event, at most until ctx
// ends or the ready timeout (WithReadyTimeout) passed, and checks its
// protocol Version (else an ErrVersion error). On an error nc is closed.
// Close closes nc, which gives up control of the supervisor: its
// foreground runs are killed, its background runs live on.
func NewConnClient(ctx context.Context, nc net.Conn, opts ...ClientOption) (*Client, error) {
	c := newClient(nc, opts)
	return c.connect(ctx, nc, time.Now().Add(c.readyTimeout))
}

// connect starts c's reader on nc and waits for the ready event until
// deadline (or ctx's end).
func (c *Client) connect(ctx context.Context, nc net.Conn, deadline time.Time) (*Client, error) {
	c.nc = nc
	peer := nc.RemoteAddr().String()
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := nc.SetReadDeadline(deadline); err != nil {
		nc.Close()
		return nil, errkind.Errorf(ErrGone, "supervisor at %s: %w", peer, err)
	}
	go c.read(nc)
	h, err := c.Ready(ctx)
	if err == nil {
		err = nc.SetReadDeadline(time.Time{})
	}
	if err == nil {
		err = c.Err() // the deadline passed as the ready event came
	}
	if err != nil {
		c.Close()
		var ne net.Error
		if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
			return nil, errkind.Errorf(ErrGone, "supervisor at %s: no ready event within %s (a supervisor that is not one, or stuck)", peer, c.readyTimeout)
		}
		return nil, fmt.Errorf("supervisor at %s: %w", peer, err)
	}
	if h.Version != Version {
		c.Close()
		return nil, errkind.Errorf(ErrVersion, "supervisor at %s speaks protocol version %d, this skillbox version %d: the agent's image and the daemon need the same skillbox build", peer, h.Version, Version)
	}
	return c, nil
}

// Run is a run started through a Client.
type Run struct {
	id             string
	pid            int
	stdout, stderr io.Writer
	done           chan struct{}
	exit           Exit
	err            error
}

// ID is the run's id.
func (r *Run) ID() string { return r.id }

// PID is the run's main process inside the sandbox.
func (r *Run) PID() int { return r.pid }

// Done is closed when the run ended (Exit) or the client died (Err).
func (r *Run) Done() <-chan struct{} { return r.done }

// Exit is how the run ended, once Done is closed and Err is nil.
func (r *Run) Exit() Exit { return r.exit }

// Err is why the run's end is unknown (the supervisor went away), once
// Done is closed.
func (r *Run) Err() error { return r.err }

// Dead is closed when the client can do no more: the supervisor's stdout
// closed, it broke the protocol, or Close was called. Err says which.
func (c *Client) Dead() <-chan struct{} { return c.dead }

// Err is why the client is dead, nil while it is not.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the supervisor's stdin, which ends it (and with it, as pid
// 1, its sandbox), or the connection of NewConnClient, which gives up
// control of it, and fails every waiting call.
func (c *Client) Close() error {
	err := c.w.Close()
	c.fail(errkind.Errorf(ErrGone, "the client was closed"))
	return err
}

// Ready waits for the supervisor's ready event, which it sends once, when
// it starts. A client made over a restored sandbox's new pipes never sees
// it: use Reseed (or Ping) there.
func (c *Client) Ready(ctx context.Context) (Hello, error) {
	select {
	case <-c.ready:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.hello, nil
	case <-c.dead:
		return Hello{}, c.Err()
	case <-ctx.Done():
		return Hello{}, fmt.Errorf("wait for the supervisor to be ready: %w", ctx.Err())
	}
}

// Start starts req (its Op is set to run) and waits until it runs. A
// foreground run's output is written to stdout and stderr (nil: dropped)
// on the client's reader goroutine, so the writers must not block for
// long. Stdin of any size is sent in parts; when sending a later part
// fails (the client died), the run is returned with the error. When ctx
// ends before the supervisor answered, the run may still start: its exit
// then goes to OnExit.
func (c *Client) Start(ctx context.Context, req Request, stdout, stderr io.Writer) (*Run, error) {
	if req.ID == "" || len(req.Argv) == 0 {
		return nil, errkind.Errorf(ErrStart, "a run needs an id and a program")
	}
	req.Op = OpRun
	rest := req.Stdin
	req.Stdin, req.StdinMore = rest[:min(len(rest), StdinChunk)], len(rest) > StdinChunk
	rest = rest[len(req.Stdin):]
	r := &Run{id: req.ID, stdout: stdout, stderr: stderr, done: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	if c.runs[req.ID] != nil {
		c.mu.Unlock()
		return nil, errkind.Errorf(ErrStart, "run id %q is in use by a live run", req.ID)
	}
	c.runs[req.ID] = r
	c.mu.Unlock()
	ev, err := c.call(ctx, req)
	if err == nil && ev.Ev != EvStarted {
		err = errkind.Errorf(ErrStart, "%s", ev.Error)
	}
	if err != nil {
		c.mu.Lock()
		if c.runs[req.ID] == r {
			delete(c.runs, req.ID)
		}
		c.mu.Unlock()
		return nil, err
	}
	r.pid = ev.PID
	for len(rest) > 0 {
		n := min(len(rest), StdinChunk)
		if err := c.send(Request{Op: OpStdin, ID: req.ID, Stdin: rest[:n], StdinMore: n < len(rest)}); err != nil {
			return r, err
		}
		rest = rest[n:]
	}
	return r, nil
}

// Signal sends sig to the process group of run id.
func (c *Client) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	_, err := c.call(ctx, Request{Op: OpSignal, ID: id, Signal: int(sig)})
	return err
}

// List is every live run and the last ended ones.
func (c *Client) List(ctx context.Context) ([]RunStatus, error) {
	ev, err := c.call(ctx, Request{Op: OpList})
	return ev.Runs, err
}

// Reseed replaces the idle python workers with fresh ones (after a
// restore) and returns once they are ready.
func (c *Client) Reseed(ctx context.Context) error {
	_, err := c.call(ctx, Request{Op: OpReseed})
	return err
}

// Ping checks that the supervisor answers.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.Status(ctx)
	return err
}

// Status pings the supervisor and returns what it says of itself now: how
// many python workers are ready for a job.
func (c *Client) Status(ctx context.Context) (Hello, error) {
	ev, err := c.call(ctx, Request{Op: OpPing})
	return Hello{PID: ev.PID, Workers: ev.Workers, PythonError: ev.Error, Version: ev.Version}, err
}

// Shutdown ends a listening supervisor (ServeListener): its runs are
// killed and it returns, so the pod it is the process of ends with it.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.call(ctx, Request{Op: OpShutdown})
	return err
}

// call sends req and waits for the event that answers it. An error event
// is an ErrRefused error, except for a run request (start_failed's too).
func (c *Client) call(ctx context.Context, req Request) (Event, error) {
	ch := make(chan Event, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return Event{}, c.err
	}
	c.seq++
	req.Seq = c.seq
	c.pending[req.Seq] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, req.Seq)
		c.mu.Unlock()
	}()
	if err := c.send(req); err != nil {
		return Event{}, err
	}
	select {
	case ev := <-ch:
		if ev.Ev == EvError {
			if req.Op == OpRun {
				return Event{}, errkind.Errorf(ErrStart, "%s", ev.Error)
			}
			return Event{}, errkind.Errorf(ErrRefused, "%s: %s", req.Op, ev.Error)
		}
		return ev, nil
	case <-c.dead:
		return Event{}, c.Err()
	case <-ctx.Done():
		return Event{}, fmt.Errorf("supervisor %s: %w", req.Op, ctx.Err())
	}
}

// send writes one request; a failed write kills the client.
func (c *Client) send(req Request) error {
	c.wmu.Lock()
	if c.nc != nil {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	}
	err := WriteFrame(c.w, req)
	c.wmu.Unlock()
	if err != nil {
		err = errkind.Errorf(ErrGone, "write to the supervisor: %w", err)
		c.fail(err)
		return c.Err()
	}
	return nil
}

// fail kills the client with err (the first one stays).
func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.dead)
	for id, r := range c.runs {
		r.err = err
		close(r.done)
		delete(c.runs, id)
	}
}

// read hands out events until the stream ends or breaks.
func (c *Client) read(r io.Reader) {
	for {
		b, err := ReadFrame(r)
		if errors.Is(err, io.EOF) {
			c.mu.Lock()
			said := c.said
			c.mu.Unlock()
			switch {
			case c.nc != nil && said != "":
				c.fail(errkind.Errorf(ErrGone, "the supervisor closed the connection: %s", said))
			case c.nc != nil:
				c.fail(errkind.Errorf(ErrGone, "the supervisor closed the connection: it ended, or another client took over"))
			default:
				c.fail(errkind.Errorf(ErrGone, "its stdout closed: the sandbox ended or the supervisor exited"))
			}
			return
		}
		if err != nil {
			c.fail(fmt.Errorf("read from the supervisor: %w", err))
			return
		}
		ev, err := DecodeEvent(b)
		if err != nil {
			c.fail(fmt.Errorf("read from the supervisor: %w", err))
			return
		}
		c.dispatch(ev)
	}
}

func (c *Client) dispatch(ev Event) {
	c.mu.Lock()
	switch ev.Ev {
	case EvReady:
		select {
		case <-c.ready:
		default:
			c.hello = Hello{PID: ev.PID, Workers: ev.Workers, PythonError: ev.Error, Version: ev.Version}
			close(c.ready)
		}
		c.mu.Unlock()
	case EvOutput:
		r := c.runs[ev.ID]
		c.mu.Unlock()
		if r == nil {
			return // a run another client started: it has no writers here
		}
		w := r.stdout
		if ev.Stream == StreamStderr {
			w = r.stderr
		}
		if w != nil {
			_, _ = w.Write(ev.Data)
		}
	case EvCollectData:
		cs := c.collects[ev.Seq]
		c.mu.Unlock()
		if cs != nil {
			cs.write(ev.Data) // files_client.go
		}
	case EvExit:
		e := Exit{Code: ev.Code, Signal: ev.Signal}
		r := c.runs[ev.ID]
		if r != nil {
			delete(c.runs, ev.ID)
			r.exit = e
			close(r.done)
		}
		c.mu.Unlock()
		if r == nil && c.onExit != nil {
			c.onExit(ev.ID, e)
		}
	default:
		if ev.Ev == EvError && ev.Seq == 0 {
			c.said = truncate(ev.Error) // why the stream may end next
		}
		ch := c.pending[ev.Seq]
		c.mu.Unlock()
		if ev.Seq != 0 && ch != nil {
			select {
			case ch <- ev:
			default: // a second answer to one request: a broken peer
			}
		}
	}
}

// StopWait bounds how long a killed run may take to be reported ended.
const StopWait = 5 * time.Second

// Stop ends a foreground run that its limits or its caller ended: on a
// timeout (graceful) as a cold run is stopped (TERM to its process group,
// grace for it to end, then KILL), else KILL at once. A signal that finds
// the run ended is no failure; a run not reported ended StopWait after
// the KILL is, and then the supervisor is not one to trust with another.
func (c *Client) Stop(ctx context.Context, run *Run, graceful bool, grace time.Duration) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace+2*StopWait)
	defer cancel()
	if graceful {
		_ = c.Signal(sctx, run.ID(), syscall.SIGTERM)
		select {
		case <-run.Done():
			return nil
		case <-time.After(grace):
		}
	}
	err := c.Signal(sctx, run.ID(), syscall.SIGKILL)
	select {
	case <-run.Done():
		return nil
	case <-time.After(StopWait):
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("the supervisor did not report the end of run %s %s after killing it", run.ID(), StopWait)
}
