package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// peer is one Acquire: a uid (known or not) and whether it is privileged.
type peer struct {
	uid        uint32
	known      bool
	privileged bool
}

func TestAcquire(t *testing.T) {
	alice, bob, root, anon := peer{1000, true, false}, peer{1001, true, false}, peer{0, true, true}, peer{0, false, false}
	for _, tc := range []struct {
		name   string
		limits Limits
		held   []peer
		next   peer
		want   Scope // "" taken
	}{
		{"under every cap", Limits{Total: 4, PerUID: 2}, []peer{alice}, alice, ""},
		{"per uid", Limits{Total: 8, PerUID: 2}, []peer{alice, alice}, alice, ScopePerUID},
		{"another uid is not bound by one's count", Limits{Total: 8, PerUID: 2}, []peer{alice, alice}, bob, ""},
		{"privileged not bound per uid", Limits{Total: 8, PerUID: 1}, []peer{root}, root, ""},
		{"total", Limits{Total: 3}, []peer{alice, bob, alice}, bob, ScopeTotal},
		{"reserve refuses others", Limits{Total: 4, PerUID: 4, Reserved: 2}, []peer{alice, bob}, alice, ScopeTotal},
		{"reserve takes the privileged", Limits{Total: 4, PerUID: 4, Reserved: 2}, []peer{alice, bob}, root, ""},
		{"privileged still bound by total", Limits{Total: 2, Reserved: 1}, []peer{alice, root}, root, ScopeTotal},
		{"reserve never takes every slot", Limits{Total: 2, Reserved: 5}, nil, alice, ""},
		{"peers without credentials share one count", Limits{Total: 8, PerUID: 2}, []peer{anon, anon}, peer{7, false, false}, ScopePerUID},
		{"unknown is not uid 0", Limits{Total: 8, PerUID: 1}, []peer{anon}, peer{0, true, false}, ""},
		{"no caps", Limits{}, []peer{alice, alice, alice}, alice, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(tc.limits)
			for _, p := range tc.held {
				if _, err := l.Acquire(p.uid, p.known, func() bool { return p.privileged }); err != nil {
					t.Fatalf("held %+v: %v", p, err)
				}
			}
			asked := false
			_, err := l.Acquire(tc.next.uid, tc.next.known, func() bool { asked = true; return tc.next.privileged })
			if asked && tc.want == "" && !tc.next.privileged {
				t.Error("privileged was asked for a connection no cap refused")
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want taken, got %v", err)
				}
				return
			}
			var re *RefusedError
			if !errors.As(err, &re) || re.Scope != tc.want || !errors.Is(err, ErrRefused) {
				t.Fatalf("want refused by %s, got %v", tc.want, err)
			}
			if !strings.Contains(err.Error(), "close idle ones") {
				t.Errorf("the refusal does not say what to do: %v", err)
			}
		})
	}
}

func TestReleaseOnce(t *testing.T) {
	l := New(Limits{Total: 2, PerUID: 1})
	rel, err := l.Acquire(5, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.Acquire(6, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	rel()
	rel() // a second release must not give back another's place
	if total, of := l.Open(5, true); total != 1 || of != 0 {
		t.Fatalf("after release: %d open, %d of uid 5; want 1 and 0", total, of)
	}
	if _, err := l.Acquire(5, true, nil); err != nil {
		t.Fatalf("uid 5 after its release: %v", err)
	}
	if _, err := l.Acquire(7, true, nil); err == nil {
		t.Fatal("a third connection over a total of 2 was taken")
	}
	other()
}

// TestListener drives a real Unix socket: a connection over the cap is
// answered 503 and closed without holding Accept, and closing a taken
// one gives its place back.
func TestListener(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	raw, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	lim := New(Limits{Total: 2})
	refused := make(chan *RefusedError, 8)
	ln := NewListener(raw, lim, func(net.Conn) (uint32, bool) { return 1, true })
	ln.Refuse = HTTPRefusal
	ln.Refused = func(_ net.Conn, err *RefusedError) { refused <- err }
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			if _, ok := c.(interface{ NetConn() net.Conn }); !ok {
				t.Error("an accepted connection does not give its net.Conn back")
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	dial()
	server := []net.Conn{<-accepted, <-accepted}
	third := dial()
	third.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(third), nil)
	if err != nil {
		t.Fatalf("the refused connection got no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "2 connections are open (at most 2)") {
		t.Fatalf("refusal: %d %q", resp.StatusCode, body)
	}
	if re := <-refused; re.Scope != ScopeTotal {
		t.Fatalf("refused by %s", re.Scope)
	}
	server[0].Close()
	server[0].Close()
	dial()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("a connection after a close was not accepted")
	}
	if total, _ := lim.Open(1, true); total != 2 {
		t.Fatalf("%d open, want 2", total)
	}
}
