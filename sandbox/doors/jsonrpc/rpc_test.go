package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
)

// testServer runs a Server on a real socket in a temp dir.
type testServer struct {
	*Server
	path string
	ln   net.Listener
	done chan error
}

func startServer(t *testing.T, opts ServerOptions, register func(*Server)) *testServer {
	t.Helper()
	s := NewServer(opts)
	s.Handle("echo", func(ctx context.Context, c *Call) (any, error) {
		return c.Params, nil
	})
	s.Handle("peer", func(ctx context.Context, c *Call) (any, error) {
		return c.Peer, nil
	})
	s.Handle("sleep", func(ctx context.Context, c *Call) (any, error) {
		var p struct {
			MS int `json:"ms"`
		}
		if err := c.Bind(&p); err != nil {
			return nil, err
		}
		select {
		case <-time.After(time.Duration(p.MS) * time.Millisecond):
			return map[string]int{"slept": p.MS}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	if register != nil {
		register(s)
	}
	path := filepath.Join(t.TempDir(), "run", "rpc.sock")
	ln, err := sockfile.Listen(path, 0o660, "")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, path: path, ln: ln, done: make(chan error, 1)}
	go func() { ts.done <- s.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return ts
}

// callsInFlight counts the calls the server is running.
func (ts *testServer) callsInFlight() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for c := range ts.conns {
		n += int(c.active.Load())
	}
	return n
}

// rawConn is a test client speaking raw lines.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func (ts *testServer) dial(t *testing.T) *rawConn {
	t.Helper()
	nc, err := net.Dial("unix", ts.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rawConn) send(line string) {
	c.t.Helper()
	if _, err := c.nc.Write([]byte(line + "\n")); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

type testResp struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	} `json:"error"`
}

func (c *rawConn) recv() testResp {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.br.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("read: %v (got %q)", err, line)
	}
	var r testResp
	if err := json.Unmarshal(line, &r); err != nil {
		c.t.Fatalf("response is not JSON: %q: %v", line, err)
	}
	if r.JSONRPC != "2.0" {
		c.t.Fatalf("response without jsonrpc 2.0: %q", line)
	}
	return r
}

// expectEOF asserts the server closes the connection within d.
func (c *rawConn) expectEOF(d time.Duration) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(d))
	b, err := c.br.ReadBytes('\n')
	if err == nil {
		c.t.Fatalf("expected the connection to close, got %q", b)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("connection still open after %s", d)
	}
}

func (c *rawConn) call(id int, method, params string) testResp {
	c.t.Helper()
	req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q`, id, method)
	if params != "" {
		req += `,"params":` + params
	}
	c.send(req + "}")
	r := c.recv()
	if string(r.ID) != strconv.Itoa(id) {
		c.t.Fatalf("response id %s, want %d", r.ID, id)
	}
	return r
}

func wantError(t *testing.T, r testResp, code int, kind string) {
	t.Helper()
	if r.Error == nil {
		t.Fatalf("want error %d, got result %s", code, r.Result)
	}
	if r.Error.Code != code {
		t.Fatalf("error code %d (%s), want %d", r.Error.Code, r.Error.Message, code)
	}
	if kind != "" && r.Error.Data["kind"] != kind {
		t.Fatalf("data.kind %v, want %s (%s)", r.Error.Data["kind"], kind, r.Error.Message)
	}
}

func TestEchoAndPeerCredentials(t *testing.T) {
	ts := startServer(t, ServerOptions{}, nil)
	c := ts.dial(t)
	r := c.call(1, "echo", `{"a":[1,2,"x"]}`)
	if r.Error != nil || string(r.Result) != `{"a":[1,2,"x"]}` {
		t.Fatalf("echo: %+v %s", r.Error, r.Result)
	}
	// String ids and null ids are echoed exactly.
	c.send(`{"jsonrpc":"2.0","id":"abc","method":"echo","params":[1]}`)
	if r := c.recv(); string(r.ID) != `"abc"` || string(r.Result) != `[1]` {
		t.Fatalf("string id: %s %s", r.ID, r.Result)
	}
	c.send(`{"jsonrpc":"2.0","id":null,"method":"echo"}`)
	if r := c.recv(); string(r.ID) != `null` || string(r.Result) != `null` {
		t.Fatalf("null id: %s %s", r.ID, r.Result)
	}

	r = c.call(2, "peer", "")
	var p api.Peer
	if err := json.Unmarshal(r.Result, &p); err != nil {
		t.Fatal(err)
	}
	if p.UID != uint32(os.Getuid()) || p.GID != uint32(os.Getgid()) || p.PID != int32(os.Getpid()) {
		t.Fatalf("peer %+v, want uid %d gid %d pid %d", p, os.Getuid(), os.Getgid(), os.Getpid())
	}
	if p.Process == "" {
		t.Errorf("peer process name is empty")
	}
}

func TestParseErrorKeepsConnection(t *testing.T) {
	ts := startServer(t, ServerOptions{}, nil)
	c := ts.dial(t)
	for _, bad := range []string{`{"jsonrpc":"2.0",`, "\x00\x01\xff\xfe binary", `{"a":}`, `nope`} {
		c.send(bad)
		r := c.recv()
		wantError(t, r, CodeParseError, api.KindInvalidParams)
		if string(r.ID) != "null" {
			t.Fatalf("parse error id %s, want null", r.ID)
		}
	}
	// Blank lines are ignored, and the connection still works.
	c.send("")
	c.send("   \t")
	if r := c.call(5, "echo", `{}`); r.Error != nil {
		t.Fatalf("after parse errors: %+v", r.Error)
	}
}

func TestMethodNotFoundSuggests(t *testing.T) {
	ts := startServer(t, ServerOptions{}, func(s *Server) {
		s.Handle("skills.load", func(context.Context, *Call) (any, error) { return nil, nil })
		s.Handle("skills.list", func(context.Context, *Call) (any, error) { return nil, nil })
	})
	c := ts.dial(t)
	r := c.call(1, "skills.lod", "")
	wantError(t, r, CodeMethodNotFound, api.KindNotFound)
	if !strings.Contains(r.Error.Message, `"skills.load"`) {
		t.Fatalf("message does not suggest skills.load: %s", r.Error.Message)
	}
	if ms, _ := r.Error.Data["methods"].([]any); len(ms) == 0 || ms[0] != "skills.load" {
		t.Fatalf("data.methods = %v", r.Error.Data["methods"])
	}
	// Nothing close: all methods are listed.
	r = c.call(2, "zzzzzzzzzzzzzz", "")
	wantError(t, r, CodeMethodNotFound, api.KindNotFound)
	if !strings.Contains(r.Error.Message, "skills.list") {
		t.Fatalf("message does not list the methods: %s", r.Error.Message)
	}
}

func TestInvalidRequest(t *testing.T) {
	ts := startServer(t, ServerOptions{}, nil)
	c := ts.dial(t)
	cases := []struct {
		line, want, id string
	}{
		{`{"jsonrpc":"1.0","id":1,"method":"echo"}`, `"2.0"`, "1"},
		{`{"id":2,"method":"echo"}`, `"2.0"`, "2"},
		{`{"jsonrpc":"2.0","id":3}`, "missing", "3"},
		{`{"jsonrpc":"2.0","id":4,"method":7}`, "string", "4"},
		{`{"jsonrpc":"2.0","id":5,"method":""}`, "empty", "5"},
		{`{"jsonrpc":"2.0","id":6,"method":"echo","params":"x"}`, "params", "6"},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"echo"}`, "id must be", "null"},
		{`{"jsonrpc":"2.0","id":true,"method":"echo"}`, "id must be", "null"},
		{`[{"jsonrpc":"2.0","id":1,"method":"echo"}]`, "batch", "null"},
		{`"just a string"`, "object", "null"},
		{`null`, "object", "null"},
		{`{"JSONRPC":"2.0","ID":8,"METHOD":"echo"}`, `"2.0"`, "null"},
	}
	for _, tc := range cases {
		c.send(tc.line)
		r := c.recv()
		wantError(t, r, CodeInvalidRequest, api.KindInvalidParams)
		if !strings.Contains(r.Error.Message, tc.want) {
			t.Errorf("%s: message %q does not mention %q", tc.line, r.Error.Message, tc.want)
		}
		if string(r.ID) != tc.id {
			t.Errorf("%s: id %s, want %s", tc.line, r.ID, tc.id)
		}
	}
}

func TestInvalidParamsAndDomainErrors(t *testing.T) {
	// Other packages' errors take their kind from the api sentinel they wrap.
	errThing := fmt.Errorf("thing exploded: %w", api.ErrLimitExceeded)
	ts := startServer(t, ServerOptions{}, func(s *Server) {
		s.Handle("strict", func(ctx context.Context, c *Call) (any, error) {
			var p struct {
				SessionID string `json:"session_id"`
				N         int    `json:"n"`
			}
			if err := c.Bind(&p); err != nil {
				return nil, err
			}
			return p, nil
		})
		s.Handle("missing", func(context.Context, *Call) (any, error) {
			return nil, api.WithData(fmt.Errorf("skill %q is not indexed: call skills.list: %w", "pdf", api.ErrNotFound), map[string]any{"skill": "pdf"})
		})
		s.Handle("confirm", func(context.Context, *Call) (any, error) {
			return nil, fmt.Errorf("run: %w", &api.ConfirmationRequiredError{ID: "cnf_1", Reason: "network", Rule: "a.hcl:3", Digest: "sha256:x"})
		})
		s.Handle("registered", func(context.Context, *Call) (any, error) {
			return nil, fmt.Errorf("boom: %w", errThing)
		})
		s.Handle("plain", func(context.Context, *Call) (any, error) {
			return nil, errors.New("disk on fire")
		})
		s.Handle("unmarshalable", func(context.Context, *Call) (any, error) {
			return map[string]any{"f": func() {}}, nil
		})
	})
	c := ts.dial(t)

	r := c.call(1, "strict", `{"sesion_id":"x"}`)
	wantError(t, r, CodeInvalidParams, api.KindInvalidParams)
	if !strings.Contains(r.Error.Message, `"sesion_id"`) {
		t.Errorf("message does not name the unknown field: %s", r.Error.Message)
	}
	r = c.call(2, "strict", `{"n":"seven"}`)
	wantError(t, r, CodeInvalidParams, api.KindInvalidParams)
	if !strings.Contains(r.Error.Message, `"n" must be a number`) {
		t.Errorf("message: %s", r.Error.Message)
	}
	if r := c.call(3, "strict", ""); r.Error != nil {
		t.Errorf("absent params should bind as {}: %+v", r.Error)
	}

	r = c.call(4, "missing", "")
	wantError(t, r, CodeNotFound, api.KindNotFound)
	if r.Error.Data["skill"] != "pdf" || !strings.Contains(r.Error.Message, "skills.list") {
		t.Errorf("not_found error: %+v", r.Error)
	}
	r = c.call(5, "confirm", "")
	wantError(t, r, CodeConfirmationRequired, api.KindConfirmationRequired)
	if r.Error.Data["confirmation_id"] != "cnf_1" || r.Error.Data["rule"] != "a.hcl:3" || r.Error.Data["digest"] != "sha256:x" {
		t.Errorf("confirmation data: %v", r.Error.Data)
	}
	wantError(t, c.call(6, "registered", ""), CodeLimitExceeded, api.KindLimitExceeded)
	r = c.call(7, "plain", "")
	wantError(t, r, CodeInternal, api.KindInternal)
	wantError(t, c.call(8, "unmarshalable", ""), CodeInternal, api.KindInternal)
}

func TestOverlongLine(t *testing.T) {
	ts := startServer(t, ServerOptions{MaxLineBytes: 1024}, nil)
	c := ts.dial(t)
	big := strings.Repeat("x", 200_000)
	c.send(`{"jsonrpc":"2.0","id":41,"method":"echo","params":{"s":"` + big + `"}}`)
	r := c.recv()
	wantError(t, r, CodeInvalidRequest, api.KindLimitExceeded)
	if string(r.ID) != "41" {
		t.Errorf("over-long line answered with id %s, want 41 (read from the line's start)", r.ID)
	}
	// The id comes after the params: it cannot be found.
	c.send(`{"jsonrpc":"2.0","params":{"s":"` + big + `"},"id":42,"method":"echo"}`)
	if r := c.recv(); string(r.ID) != "null" || r.Error == nil {
		t.Errorf("want an error with id null, got %s %+v", r.ID, r.Error)
	}
	// Exactly at the limit is fine; the connection still works.
	line := `{"jsonrpc":"2.0","id":43,"method":"echo","params":{"s":"`
	line += strings.Repeat("y", 1024-len(line)-3) + `"}}`
	if len(line) != 1024 {
		t.Fatalf("test line is %d bytes", len(line))
	}
	c.send(line)
	if r := c.recv(); r.Error != nil || string(r.ID) != "43" {
		t.Fatalf("line at the limit: %+v", r.Error)
	}
}

func TestBrokenClientsDoNotHurt(t *testing.T) {
	ts := startServer(t, ServerOptions{LineTimeout: 200 * time.Millisecond}, nil)
	// Half a line, then disconnect.
	c := ts.dial(t)
	c.nc.Write([]byte(`{"jsonrpc":"2.0","id":1,"meth`))
	c.nc.Close()
	// Binary junk without newlines, then disconnect.
	c = ts.dial(t)
	junk := make([]byte, 300_000)
	for i := range junk {
		junk[i] = byte(i * 7)
		if junk[i] == '\n' {
			junk[i] = 0
		}
	}
	c.nc.Write(junk)
	c.nc.Close()
	// Disconnect in the middle of a call.
	c = ts.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}`)
	c.nc.Close()
	// Slowloris: a line that never completes is dropped after LineTimeout.
	c = ts.dial(t)
	c.nc.Write([]byte(`{"jsonrpc":`))
	time.Sleep(50 * time.Millisecond)
	c.nc.Write([]byte(`"2.0",`))
	c.expectEOF(2 * time.Second)

	// The daemon is fine.
	c = ts.dial(t)
	if r := c.call(9, "echo", `{}`); r.Error != nil {
		t.Fatal(r.Error)
	}
}

func TestDisconnectCancelsHandler(t *testing.T) {
	started := make(chan struct{})
	cause := make(chan error, 1)
	ts := startServer(t, ServerOptions{}, func(s *Server) {
		s.Handle("block", func(ctx context.Context, c *Call) (any, error) {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil, ctx.Err()
		})
	})
	c := ts.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"block"}`)
	<-started
	c.nc.Close()
	select {
	case err := <-cause:
		if !errors.Is(err, ErrClientGone) {
			t.Fatalf("cause %v, want ErrClientGone", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("handler ctx not cancelled after the client disconnected")
	}
}

func TestHalfCloseStillAnswered(t *testing.T) {
	ts := startServer(t, ServerOptions{}, nil)
	c := ts.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":300}}`)
	if err := c.nc.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	r := c.recv()
	if r.Error != nil || string(r.ID) != "1" {
		t.Fatalf("half-closed client: %+v", r.Error)
	}
}

func TestCancelNotification(t *testing.T) {
	cause := make(chan error, 1)
	started := make(chan struct{})
	ts := startServer(t, ServerOptions{}, func(s *Server) {
		s.Handle("block", func(ctx context.Context, c *Call) (any, error) {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil, ctx.Err()
		})
	})
	c := ts.dial(t)
	c.send(`{"jsonrpc":"2.0","id":7,"method":"block"}`)
	<-started
	// A duplicate id while 7 is in flight is refused.
	c.send(`{"jsonrpc":"2.0","id":7,"method":"echo"}`)
	wantError(t, c.recv(), CodeInvalidRequest, "")
	c.send(`{"jsonrpc":"2.0","method":"rpc.cancel","params":{"id":7}}`)
	if err := <-cause; !errors.Is(err, ErrCallCancelled) {
		t.Fatalf("cause %v, want ErrCallCancelled", err)
	}
	r := c.recv()
	wantError(t, r, CodeUnavailable, api.KindUnavailable)
	if string(r.ID) != "7" || !strings.Contains(r.Error.Message, "cancelled") {
		t.Fatalf("cancelled call answered %s %q", r.ID, r.Error.Message)
	}
	// rpc.cancel as a request says whether it found the call.
	if r := c.call(8, "rpc.cancel", `{"id":99}`); string(r.Result) != `{"cancelled":false}` {
		t.Fatalf("rpc.cancel result %s", r.Result)
	}
}

func TestConcurrentCallsAnsweredByID(t *testing.T) {
	ts := startServer(t, ServerOptions{}, nil)
	c := ts.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":400}}`)
	c.send(`{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":10}}`)
	c.send(`{"jsonrpc":"2.0","method":"echo","params":{"notification":true}}`) // no response
	c.send(`{"jsonrpc":"2.0","id":3,"method":"echo","params":{}}`)
	var order []string
	for range 3 {
		order = append(order, string(c.recv().ID))
	}
	if order[2] != "1" {
		t.Fatalf("responses in order %v; the slow call 1 should come last", order)
	}

	// Many concurrent calls on one connection from several goroutines.
	var wg sync.WaitGroup
	var wmu sync.Mutex
	const n = 100
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wmu.Lock()
			defer wmu.Unlock()
			fmt.Fprintf(c.nc, `{"jsonrpc":"2.0","id":%d,"method":"sleep","params":{"ms":%d}}`+"\n", 100+i, (i*37)%50)
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for range n {
		r := c.recv()
		if r.Error != nil {
			t.Fatal(r.Error)
		}
		seen[string(r.ID)] = true
	}
	if len(seen) != n {
		t.Fatalf("got %d distinct ids, want %d", len(seen), n)
	}
}

func TestMaxConnections(t *testing.T) {
	ts := startServer(t, ServerOptions{MaxConnections: 2}, nil)
	a, b := ts.dial(t), ts.dial(t)
	a.call(1, "echo", "{}")
	b.call(1, "echo", "{}")
	c := ts.dial(t)
	r := c.recv()
	wantError(t, r, CodeUnavailable, api.KindUnavailable)
	if !strings.Contains(r.Error.Message, "too many connections") {
		t.Fatalf("message %q", r.Error.Message)
	}
	c.expectEOF(2 * time.Second)
	// A slot frees up when a client leaves.
	a.nc.Close()
	waitfor.True(t, "a slot after a client left", 3*time.Second, func() bool {
		d := ts.dial(t)
		// A refused connection is answered and closed at once, so the
		// write may meet a closed socket; the refusal is still read below.
		d.nc.Write([]byte(`{"jsonrpc":"2.0","id":5,"method":"echo"}` + "\n"))
		return d.recv().Error == nil
	})
}

func TestIdleTimeout(t *testing.T) {
	ts := startServer(t, ServerOptions{IdleTimeout: 150 * time.Millisecond}, nil)
	// A call in flight longer than the idle timeout keeps the connection.
	c := ts.dial(t)
	if r := c.call(1, "sleep", `{"ms":500}`); r.Error != nil {
		t.Fatalf("long call on an idle-timeout connection: %+v", r.Error)
	}
	// Then, idle, it is closed.
	c.expectEOF(2 * time.Second)
}

func TestPanicInHandler(t *testing.T) {
	ts := startServer(t, ServerOptions{}, func(s *Server) {
		s.Handle("panic", func(context.Context, *Call) (any, error) { panic("kaboom") })
	})
	c := ts.dial(t)
	r := c.call(1, "panic", "")
	wantError(t, r, CodeInternal, api.KindInternal)
	if strings.Contains(r.Error.Message, "kaboom") {
		t.Errorf("panic value leaked to the client: %s", r.Error.Message)
	}
	if r := c.call(2, "echo", "{}"); r.Error != nil {
		t.Fatal("connection broken after a panic")
	}
}

func TestAuthorizeRefuses(t *testing.T) {
	var refused atomic.Int32
	var mu sync.Mutex
	var reason string
	ts := startServer(t, ServerOptions{
		Authorize: func(p api.Peer) error {
			return fmt.Errorf("uid %d may not use skillbox: add it to daemon.allowed_uids", p.UID)
		},
		OnAuthRefused: func(p api.Peer, r string) {
			mu.Lock()
			reason = r
			mu.Unlock()
			if p.PID == int32(os.Getpid()) {
				refused.Add(1)
			}
		},
	}, nil)
	c := ts.dial(t)
	r := c.recv()
	wantError(t, r, CodeDenied, api.KindDenied)
	c.expectEOF(2 * time.Second)
	if refused.Load() != 1 {
		t.Fatalf("OnAuthRefused called %d times with our pid", refused.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(reason, "may not use") {
		t.Fatalf("reason %q", reason)
	}
}

func TestNonUnixConnRefused(t *testing.T) {
	var refused atomic.Int32
	s := NewServer(ServerOptions{OnAuthRefused: func(p api.Peer, _ string) { refused.Add(1) }})
	s.Handle("echo", func(context.Context, *Call) (any, error) { return 1, nil })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no tcp:", err)
	}
	go s.Serve(context.Background(), ln)
	defer s.Shutdown(context.Background())
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fmt.Fprintln(nc, `{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	if b, err := bufio.NewReader(nc).ReadBytes('\n'); err == nil {
		t.Fatalf("a connection without peer credentials was served: %s", b)
	}
	if refused.Load() != 1 {
		t.Fatalf("OnAuthRefused called %d times", refused.Load())
	}
}

func TestShutdownWaitsThenCancels(t *testing.T) {
	cause := make(chan error, 1)
	startedBlock := make(chan struct{})
	ts := startServer(t, ServerOptions{}, func(s *Server) {
		s.Handle("block", func(ctx context.Context, c *Call) (any, error) {
			close(startedBlock)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil, ctx.Err()
		})
	})
	// Phase 1: a short call in flight finishes and is answered.
	c := ts.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":300}}`)
	waitfor.True(t, "the short call to be in flight", 2*time.Second, func() bool { return ts.callsInFlight() == 1 })

	c2 := ts.dial(t)
	c2.send(`{"jsonrpc":"2.0","id":1,"method":"block"}`)
	<-startedBlock

	shutdownDone := make(chan error, 1)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
	defer cancel()
	go func() { shutdownDone <- ts.Shutdown(ctx) }()

	// The sleeping call completes normally during shutdown.
	if r := c.recv(); r.Error != nil {
		t.Fatalf("in-flight call during shutdown: %+v", r.Error)
	}
	// A new call during shutdown is refused as unavailable.
	waitfor.True(t, "the shutdown to begin", 2*time.Second, func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return ts.closing
	})
	c.send(`{"jsonrpc":"2.0","id":2,"method":"echo"}`)
	wantError(t, c.recv(), CodeUnavailable, api.KindUnavailable)
	// No new connections.
	if _, err := os.Lstat(ts.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file still there during shutdown: %v", err)
	}

	// The blocking call is cancelled at the deadline.
	select {
	case err := <-cause:
		if !errors.Is(err, ErrShuttingDown) {
			t.Fatalf("cause %v", err)
		}
		if el := time.Since(start); el < 700*time.Millisecond {
			t.Fatalf("cancelled after %s, before the shutdown deadline", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocking call never cancelled")
	}
	if err := <-shutdownDone; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	if err := <-ts.done; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v", err)
	}
	c.expectEOF(2 * time.Second)
}

func TestShutdownIdleIsQuick(t *testing.T) {
	ts := startServer(t, ServerOptions{}, nil)
	c := ts.dial(t)
	c.call(1, "echo", "{}")
	start := time.Now()
	if err := ts.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("idle shutdown took %s", time.Since(start))
	}
	c.expectEOF(time.Second)
}

func TestServeCtxCancelIsHardStop(t *testing.T) {
	s := NewServer(ServerOptions{})
	cause := make(chan error, 1)
	started := make(chan struct{})
	s.Handle("block", func(ctx context.Context, c *Call) (any, error) {
		close(started)
		<-ctx.Done()
		cause <- ctx.Err()
		return nil, ctx.Err()
	})
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := sockfile.Listen(path, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fmt.Fprintln(nc, `{"jsonrpc":"2.0","id":1,"method":"block"}`)
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve = %v", err)
	}
	select {
	case <-cause:
	case <-time.After(3 * time.Second):
		t.Fatal("call not cancelled by Serve's ctx")
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("socket left behind")
	}
}

func TestHandleRejectsReserved(t *testing.T) {
	s := NewServer(ServerOptions{})
	for _, name := range []string{"", "rpc.cancel", "rpc.x"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Handle(%q) did not panic", name)
				}
			}()
			s.Handle(name, func(context.Context, *Call) (any, error) { return nil, nil })
		}()
	}
}

func TestPeekID(t *testing.T) {
	cases := map[string]string{
		`{"jsonrpc":"2.0","id":12,"method":"x","params":{"a":"`: "12",
		`{"id":"a\"b","params":`:                                `"a\"b"`,
		`{"params":{"a":1},"id":3`:                              "3",
		`{"params":{"a":"xxxxx`:                                 "",
		`[1,2`:                                                  "",
		`{"id":{"x":1}}`:                                        "",
		``:                                                      "",
	}
	for in, want := range cases {
		if got := string(peekID([]byte(in))); got != want {
			t.Errorf("peekID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPeekMethod(t *testing.T) {
	cases := map[string]string{
		`{"jsonrpc":"2.0","id":12,"method":"skills.read","params":{"a":"`: "skills.read",
		`{"id":1,"params":{"method":"inner"},"method":"outer","x":"`:      "outer",
		`{"method":7,"params":"`: "",
		`{"params":{"a":"xxxxx`:  "",
		`not json`:               "",
	}
	for in, want := range cases {
		if got := peekMethod([]byte(in)); got != want {
			t.Errorf("peekMethod(%q) = %q, want %q", in, got, want)
		}
	}
}

// OnCallError hears of every refused or failed call, transport-level or
// from a handler, before the answer; a panicking hook harms nothing;
// OnConnClosed comes after all of a connection's calls.
func TestCallErrorHooks(t *testing.T) {
	var mu sync.Mutex
	var got []CallError
	var closed []uint64
	sentinel := errors.New("the handler's own error")
	ts := startServer(t, ServerOptions{
		MaxLineBytes: 1024,
		OnCallError: func(ce *CallError) {
			mu.Lock()
			defer mu.Unlock()
			cp := *ce
			cp.Line = append([]byte(nil), ce.Line...)
			got = append(got, cp)
			if ce.Method == "panic.hook" {
				panic("hook bug")
			}
		},
		OnConnClosed: func(id uint64, p api.Peer) {
			mu.Lock()
			closed = append(closed, id)
			mu.Unlock()
		},
	}, func(s *Server) {
		s.Handle("fail", func(ctx context.Context, c *Call) (any, error) {
			return nil, fmt.Errorf("wrapped: %w: %w", sentinel, api.ErrNotFound)
		})
	})
	c := ts.dial(t)
	c.send(`not json`)
	wantError(t, c.recv(), CodeParseError, api.KindInvalidParams)
	c.send(`{"jsonrpc":"1.0","id":2,"method":"echo"}`)
	wantError(t, c.recv(), CodeInvalidRequest, api.KindInvalidParams)
	wantError(t, c.call(3, "nope", `{"k":1}`), CodeMethodNotFound, api.KindNotFound)
	c.send(`{"jsonrpc":"2.0","id":4,"method":"echo","params":{"pad":"` + strings.Repeat("y", 2000) + `"}}`)
	wantError(t, c.recv(), CodeInvalidRequest, api.KindLimitExceeded)
	wantError(t, c.call(5, "fail", `{"a":1}`), CodeNotFound, api.KindNotFound)
	c.send(`{"jsonrpc":"2.0","method":"fail"}`) // a notification: no answer
	wantError(t, c.call(6, "panic.hook", ""), CodeMethodNotFound, api.KindNotFound)
	if r := c.call(7, "echo", `{"still":"up"}`); r.Error != nil {
		t.Fatalf("server unusable after a hook panicked: %+v", r.Error)
	}
	c.nc.Close()
	waitfor.True(t, "OnConnClosed", time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(closed) == 1
	})

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 7 {
		t.Fatalf("%d hook calls, want 7: %+v", len(got), got)
	}
	me := uint32(os.Getuid())
	for i, ce := range got {
		if ce.ConnID != closed[0] || ce.Peer.UID != me || ce.Resp == nil {
			t.Errorf("call %d: conn %d peer %+v resp %v", i, ce.ConnID, ce.Peer, ce.Resp)
		}
	}
	if ce := got[0]; ce.ID != nil || ce.Method != "" || string(ce.Line) != "not json" || ce.LineBytes != 8 || ce.Resp.Code != CodeParseError || ce.Err != nil {
		t.Errorf("parse error: %+v", ce)
	}
	if ce := got[1]; string(ce.ID) != "2" || ce.Method != "echo" || ce.Resp.Code != CodeInvalidRequest {
		t.Errorf("invalid request: %+v", ce)
	}
	if ce := got[2]; string(ce.ID) != "3" || ce.Method != "nope" || string(ce.Params) != `{"k":1}` || ce.Line != nil || ce.Resp.Code != CodeMethodNotFound {
		t.Errorf("unknown method: %+v", ce)
	}
	if ce := got[3]; string(ce.ID) != "4" || ce.Method != "echo" || len(ce.Line) == 0 || ce.LineBytes <= 2000 || ce.Resp.Kind != api.KindLimitExceeded {
		t.Errorf("over-long line: id %s method %q line %d/%d", ce.ID, ce.Method, len(ce.Line), ce.LineBytes)
	}
	if ce := got[4]; string(ce.ID) != "5" || !errors.Is(ce.Err, sentinel) || ce.Resp.Kind != api.KindNotFound {
		t.Errorf("handler error: %+v", ce)
	}
	// The notification's handler runs on its own goroutine: its hook may
	// come before or after the next line's.
	var note, pan *CallError
	for i := 5; i < 7; i++ {
		switch got[i].Method {
		case "fail":
			note = &got[i]
		case "panic.hook":
			pan = &got[i]
		}
	}
	if note == nil || note.ID != nil || note.Err == nil {
		t.Errorf("failed notification: %+v", note)
	}
	if pan == nil || string(pan.ID) != "6" {
		t.Errorf("panicking hook's call: %+v", pan)
	}
}
