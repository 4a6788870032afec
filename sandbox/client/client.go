// Package client is the Go client for the skillbox daemon, for hosts (agent
// runtimes, chat apps, IDE agents) that delegate skill work to it over its
// Unix socket. It speaks the daemon's JSON-RPC 2.0 protocol, one JSON object
// per line, and offers a typed method per tool call with the types of
// sandbox/api, which the daemon's service uses too, so both sides cannot
// drift.
//
// One Client multiplexes concurrent calls over one connection (responses are
// matched by id). Cancelling a call's ctx tells the daemon to stop it (the
// "rpc.cancel" notification), so a host that gives up on a run does not leave
// a sandbox running. If the daemon drops the connection (idle timeout,
// restart), the next call dials again; calls that were in flight fail, and
// are never retried, since a run is not idempotent. Sessions live in the
// daemon's state, so they survive reconnects and daemon restarts.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// DefaultSocket is where the daemon listens unless configured otherwise;
// EnvSocket overrides it for SocketPath.
const (
	DefaultSocket = "/run/skillbox/skillbox.sock"
	EnvSocket     = "SKILLBOX_SOCKET"
)

// SocketPath returns $SKILLBOX_SOCKET, or DefaultSocket when it is unset.
func SocketPath() string {
	if p := os.Getenv(EnvSocket); p != "" {
		return p
	}
	return DefaultSocket
}

// MaxResponseBytes bounds one response line; run results carry base64
// outputs, so it is well above the daemon's request limit.
const MaxResponseBytes = 256 << 20

// ErrClosed is returned by calls on a Client after Close. It is of kind
// unavailable (matches api.ErrUnavailable).
var ErrClosed error = &unavailableError{"skillbox client closed"}

// ErrConnectionLost is returned by calls that were in flight when the
// connection to the daemon broke; whether they ran is unknown. It is of
// kind unavailable (matches api.ErrUnavailable).
var ErrConnectionLost error = &unavailableError{"connection to skillbox lost"}

// unavailableError is a sentinel of the client's own whose kind is
// unavailable, as the service's is when it cannot answer.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }
func (e *unavailableError) Unwrap() error { return api.ErrUnavailable }

// Error is an error the daemon returned for a call: the wire error type
// the daemon encodes (api.Error). Kind is data.kind (one of the api.Kind
// constants); Data holds the other data fields, e.g. confirmation_id for
// api.KindConfirmationRequired (see ConfirmationRequired). It unwraps to its
// kind's sentinel, so errors.Is(err, api.ErrDenied) works across the socket
// as it does in process.
type Error = api.Error

// IsKind reports whether err is an RPC error of kind.
func IsKind(err error, kind string) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == kind
}

// Client is a connection to the daemon; safe for concurrent use.
type Client struct {
	path   string
	nextID atomic.Uint64

	mu     sync.Mutex
	cur    *conn
	closed bool
	onNote atomic.Pointer[func(Notification)]
}

// Dial connects to the daemon's socket.
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	c := &Client{path: socketPath}
	cc, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.cur = cc
	return c, nil
}

func (c *Client) dial(ctx context.Context) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to skillbox at %s (is `skillbox serve` running? set --socket or %s): %w", c.path, EnvSocket, err)
	}
	cc := &conn{client: c, nc: nc, pending: map[uint64]chan response{}, done: make(chan struct{})}
	go cc.readLoop()
	return cc, nil
}

// connection returns the live connection, dialling again if the last one
// broke.
func (c *Client) connection(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.cur != nil && !c.cur.dead() {
		return c.cur, nil
	}
	cc, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.cur = cc
	return cc, nil
}

// Close closes the connection; calls in flight fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.cur != nil {
		c.cur.fail(ErrClosed)
	}
	return nil
}

// Call sends method with params (any JSON-encodable value; nil sends no
// params) and decodes the result into result (a pointer; nil discards it).
// An error from the daemon is an *Error. When ctx ends first the daemon is
// asked to cancel the call and ctx's error is returned.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	cc, err := c.connection(ctx)
	if err != nil {
		return err
	}
	id := c.nextID.Add(1)
	req := struct {
		JSONRPC string `json:"jsonrpc"`
		// The id goes before the params, so the daemon can still answer by
		// id when the line is too long to read whole.
		ID     uint64 `json:"id"`
		Method string `json:"method"`
		Params any    `json:"params,omitempty"`
	}{"2.0", id, method, params}
	line, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding %s params: %w", method, err)
	}
	line = append(line, '\n')

	if err := ctx.Err(); err != nil {
		return err
	}
	ch := make(chan response, 1)
	if err := cc.register(id, ch); err != nil {
		return err
	}
	if err := cc.write(ctx, line); err != nil {
		cc.unregister(id)
		return err
	}
	select {
	case r := <-ch:
		return r.decode(method, result)
	case <-ctx.Done():
		cc.unregister(id)
		select {
		case r := <-ch: // answered meanwhile
			return r.decode(method, result)
		default:
		}
		go cc.cancel(id)
		return ctx.Err()
	case <-cc.done:
		select {
		case r := <-ch:
			return r.decode(method, result)
		default:
		}
		return cc.failure()
	}
}

type response struct {
	result json.RawMessage
	err    *Error
}

func (r response) decode(method string, result any) error {
	if r.err != nil {
		return r.err
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(r.result, result); err != nil {
		return fmt.Errorf("decoding the result of %s: %w", method, err)
	}
	return nil
}

// conn is one connection to the daemon.
type conn struct {
	client *Client
	nc     net.Conn
	wmu    sync.Mutex

	mu      sync.Mutex
	pending map[uint64]chan response
	err     error // why the connection ended
	connErr *Error
	done    chan struct{}
}

func (cc *conn) dead() bool {
	select {
	case <-cc.done:
		return true
	default:
		return false
	}
}

func (cc *conn) register(id uint64, ch chan response) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil {
		return cc.failureLocked()
	}
	cc.pending[id] = ch
	return nil
}

func (cc *conn) unregister(id uint64) {
	cc.mu.Lock()
	delete(cc.pending, id)
	cc.mu.Unlock()
}

// failure is the error for calls cut off by the connection's end.
func (cc *conn) failure() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.failureLocked()
}

func (cc *conn) failureLocked() error {
	if cc.connErr != nil {
		// The daemon said why before it hung up (too many connections,
		// refused peer, shutting down).
		return cc.connErr
	}
	if errors.Is(cc.err, ErrClosed) {
		return ErrClosed
	}
	return errkind.Wrap(ErrConnectionLost, cc.err)
}

// fail ends the connection with err (first error wins).
func (cc *conn) fail(err error) {
	cc.mu.Lock()
	if cc.err == nil {
		cc.err = err
		close(cc.done)
	}
	cc.mu.Unlock()
	cc.nc.Close()
}

// write sends one line whole; a write cut short leaves half a line on the
// stream, so any write error ends the connection.
func (cc *conn) write(ctx context.Context, line []byte) error {
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	if cc.dead() {
		return cc.failure()
	}
	deadline, _ := ctx.Deadline()
	cc.nc.SetWriteDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { cc.nc.SetWriteDeadline(time.Now()) })
	_, err := cc.nc.Write(line)
	stopped := stop()
	if err != nil {
		// The daemon may have hung up after saying why (e.g. too many
		// connections); give the reader a moment to pick that up.
		if ctx.Err() == nil {
			select {
			case <-cc.done:
			case <-time.After(time.Second):
			}
		}
		cc.fail(err)
		if !stopped && ctx.Err() != nil {
			return ctx.Err()
		}
		return cc.failure()
	}
	return nil
}

// cancel asks the daemon to stop call id (best effort).
func (cc *conn) cancel(id uint64) {
	line := []byte(`{"jsonrpc":"2.0","method":"rpc.cancel","params":{"id":` + strconv.FormatUint(id, 10) + "}}\n")
	ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	cc.write(ctx, line)
}

// readLoop delivers responses to their calls until the connection ends.
func (cc *conn) readLoop() {
	br := bufio.NewReaderSize(cc.nc, 64<<10)
	var buf []byte
	for {
		buf = buf[:0]
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			if len(buf)+len(chunk) > MaxResponseBytes {
				err = fmt.Errorf("a response is longer than %d bytes", MaxResponseBytes)
				break
			}
			buf = append(buf, chunk...)
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the daemon closed the connection")
			}
			cc.fail(err) // waiting calls wake on done
			return
		}
		cc.deliver(bytes.TrimSpace(buf))
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
}

func (cc *conn) deliver(line []byte) {
	if len(line) == 0 {
		return
	}
	var w struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if err := json.Unmarshal(line, &w); err != nil {
		cc.fail(fmt.Errorf("the daemon sent something that is not JSON-RPC: %v", err))
		return
	}
	if w.ID == nil && w.Method != "" {
		if h := cc.client.notifyHandler(); h != nil {
			h(Notification{Method: w.Method, Params: w.Params})
		}
		return
	}
	id, err := strconv.ParseUint(string(w.ID), 10, 64)
	if err != nil {
		// An error without a usable id is about the connection itself.
		if w.Error != nil {
			cc.mu.Lock()
			cc.connErr = w.Error
			cc.mu.Unlock()
		}
		return
	}
	cc.mu.Lock()
	ch := cc.pending[id]
	delete(cc.pending, id)
	cc.mu.Unlock()
	if ch == nil {
		return // cancelled call answered late
	}
	if w.Error != nil {
		ch <- response{err: w.Error}
		return
	}
	if w.Result == nil {
		w.Result = json.RawMessage("null")
	}
	ch <- response{result: w.Result}
}

// Notification is a message the daemon sent without being asked: the
// events of a run called with Stream set (run.started, run.output,
// run.output_dropped, run.exited).
type Notification struct {
	Method string
	Params json.RawMessage
}

// Event decodes the notification into its api event type.
func (n Notification) Event() (api.Event, error) {
	var ev api.Event
	switch n.Method {
	case api.EventRunStarted:
		ev = &api.RunStartedEvent{}
	case api.EventRunOutput:
		ev = &api.RunOutputEvent{}
	case api.EventRunOutputDropped:
		ev = &api.RunOutputDroppedEvent{}
	case api.EventRunExited:
		ev = &api.RunExitedEvent{}
	default:
		return nil, fmt.Errorf("skillbox: unknown notification %q", n.Method)
	}
	if err := json.Unmarshal(n.Params, ev); err != nil {
		return nil, fmt.Errorf("skillbox: decoding %s: %w", n.Method, err)
	}
	return ev, nil
}

// OnNotification sets the function that receives every notification the
// daemon sends on this client's connections (nil: they are ignored). It is
// called on the connection's reader, in order, before the response of the
// call they belong to; it must return quickly.
func (c *Client) OnNotification(h func(Notification)) {
	if h == nil {
		c.onNote.Store(nil)
		return
	}
	c.onNote.Store(&h)
}

func (c *Client) notifyHandler() func(Notification) {
	if h := c.onNote.Load(); h != nil {
		return *h
	}
	return nil
}

// decodeList accepts a list result either as a bare array or wrapped in an
// object under key ({"skills": [...]}).
func decodeList(raw json.RawMessage, key string, out any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return err
		}
		raw = m[key]
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, out)
}
