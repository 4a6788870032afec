package jsonrpc

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
)

// An id that is not valid UTF-8 is never echoed raw.
func TestInvalidUTF8IDNotEchoed(t *testing.T) {
	ts := startServer(t, ServerOptions{}, nil)
	c := ts.dial(t)
	for _, line := range []string{
		"{\"jsonrpc\":\"2.0\",\"id\":\"a\xff\x1b[31m\",\"method\":\"echo\"}",
		"{\"jsonrpc\":\"2.0\",\"id\":\"\xc3\",\"method\":\"nope\"}",
	} {
		c.send(line)
		c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := c.br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(got) || bytes.Contains(got, []byte{0xff}) || bytes.Contains(got, []byte{0xc3, '"'}) {
			t.Errorf("response echoes an invalid UTF-8 id: %q", got)
		}
	}
}

// One uid gets at most MaxConnsPerUID connections, and the
// reserve of MaxConnections is kept for privileged peers (approvers).
func TestConnectionsPerUIDAndReserve(t *testing.T) {
	var privileged atomic.Bool
	var refusedMu sync.Mutex
	var refused []string
	ts := startServer(t, ServerOptions{MaxConnections: 4, ReservedConns: 1, MaxConnsPerUID: 2,
		Privileged:    func(api.Peer) bool { return privileged.Load() },
		OnConnRefused: func(p api.Peer, why string) { refusedMu.Lock(); refused = append(refused, why); refusedMu.Unlock() },
	}, nil)
	a, b := ts.dial(t), ts.dial(t)
	a.call(1, "echo", "{}")
	b.call(1, "echo", "{}")
	c := ts.dial(t)
	r := c.recv()
	wantError(t, r, CodeLimitExceeded, api.KindLimitExceeded)
	if !strings.Contains(r.Error.Message, "max_connections_per_uid") {
		t.Fatalf("message %q", r.Error.Message)
	}
	// An approver is not bound by the per-uid cap and may use the reserve.
	privileged.Store(true)
	d, e := ts.dial(t), ts.dial(t)
	d.call(1, "echo", "{}")
	e.call(1, "echo", "{}")
	f := ts.dial(t)
	wantError(t, f.recv(), CodeUnavailable, api.KindUnavailable)
	refusedMu.Lock()
	defer refusedMu.Unlock()
	if len(refused) != 2 {
		t.Errorf("OnConnRefused told %d times, want 2: %q", len(refused), refused)
	}
}

// The bytes of one uid's requests in flight are bounded.
func TestRequestBytesPerUID(t *testing.T) {
	ts := startServer(t, ServerOptions{MaxRequestBytesPerUID: 300}, nil)
	c := ts.dial(t)
	pad := strings.Repeat(" ", 200)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":3000` + pad + `}}`)
	waitfor.True(t, "the first call to be in flight", 2*time.Second, func() bool { return ts.callsInFlight() == 1 })
	c.send(`{"jsonrpc":"2.0","id":2,"method":"echo","params":{"x":1` + pad + `}}`)
	r := c.recv()
	if string(r.ID) != "2" {
		t.Fatalf("first answer is for id %s", r.ID)
	}
	wantError(t, r, CodeLimitExceeded, api.KindLimitExceeded)
}

// A line counts towards its uid's request bytes while it is
// read, so many connections of one uid cannot each buffer a line up to
// MaxLineBytes; the refused line is answered and the connection stays.
func TestRequestBytesPerUIDWhileReading(t *testing.T) {
	ts := startServer(t, ServerOptions{MaxLineBytes: 1 << 20, MaxRequestBytesPerUID: 256 << 10}, nil)
	a, b := ts.dial(t), ts.dial(t)
	pad := strings.Repeat(" ", 200<<10)
	a.send(`{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":3000` + pad + `}}`)
	waitfor.True(t, "the first call to be in flight", 2*time.Second, func() bool { return ts.callsInFlight() == 1 })
	b.send(`{"jsonrpc":"2.0","id":7,"method":"echo","params":{"x":1` + pad + `}}`)
	r := b.recv()
	if string(r.ID) != "7" {
		t.Fatalf("answer for id %s", r.ID)
	}
	wantError(t, r, CodeLimitExceeded, api.KindLimitExceeded)
	if !strings.Contains(r.Error.Message, "max_request_bytes_per_uid") {
		t.Fatalf("message %q", r.Error.Message)
	}
	// Once the first call is over, the same connection is served again.
	if r := a.recv(); r.Error != nil {
		t.Fatalf("sleep: %+v", r.Error)
	}
	b.call(8, "echo", `{"x":2`+pad+`}`)
}
