package supervisor_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/supervisor"
)

func frame(payload string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}

func TestReadFrame(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // error text, "" for none
	}{
		{"ok", string(frame(`{"ev":"pong"}`)), ""},
		{"empty stream", "", "EOF"},
		{"cut header", "\x00\x00", "inside a frame header"},
		{"cut body", "\x00\x00\x00\x10{}", "inside a frame of 16 bytes"},
		{"huge", "\xff\xff\xff\xff", "frame of 4294967295 bytes, at most 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := supervisor.ReadFrame(strings.NewReader(tc.in))
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDecodeEvent(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"ev":"output","id":"a","stream":"stdout","data":"aGk="}`, ""},
		{`{"ev":"exit","id":"a","code":137,"signal":"SIGKILL"}`, ""},
		{`{"ev":"output","id":"a","stream":"tty"}`, "stream"},
		{`{"ev":"exit"}`, "without a run id"},
		{`{"ev":"bogus"}`, "unknown event"},
		{`[1,2]`, "not JSON"},
	} {
		_, err := supervisor.DecodeEvent([]byte(tc.in))
		if (err == nil) != (tc.want == "") || (err != nil && (!strings.Contains(err.Error(), tc.want) || !errors.Is(err, supervisor.ErrProtocol))) {
			t.Errorf("%s: got %v, want %q", tc.in, err, tc.want)
		}
	}
}

// nopCloser is a supervisor's stdin that swallows requests.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// TestHostileSupervisor: what comes out of a sandbox is untrusted; garbage
// kills the client with a clear error, and nothing panics.
func TestHostileSupervisor(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  []byte
		kind error
		want string
	}{
		{"huge length", []byte("\xff\xff\xff\xff"), supervisor.ErrProtocol, "at most 1048576"},
		{"not json", frame("hello"), supervisor.ErrProtocol, "not JSON"},
		{"unknown event", frame(`{"ev":"x"}`), supervisor.ErrProtocol, "unknown event"},
		{"text", []byte("Traceback (most recent call last):\n"), supervisor.ErrProtocol, "frame of"},
		{"closed", nil, supervisor.ErrGone, "stdout closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := supervisor.NewClient(nopCloser{io.Discard}, bytes.NewReader(tc.out))
			err := c.Ping(ctxT(t))
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ping: %v, want %v saying %q", err, tc.kind, tc.want)
			}
			select {
			case <-c.Dead():
			case <-time.After(5 * time.Second):
				t.Fatal("not dead")
			}
			if _, err := c.Start(ctxT(t), supervisor.Request{ID: "a", Argv: []string{"true"}}, nil, nil); !errors.Is(err, tc.kind) {
				t.Errorf("start after death: %v", err)
			}
		})
	}
}

// TestOnExit: the exit of a run this client did not start (one from before
// a restore) goes to OnExit; a started run's goes to its Run.
func TestOnExit(t *testing.T) {
	var out bytes.Buffer
	for _, ev := range []string{
		`{"ev":"output","id":"old","stream":"stdout","data":"aGk="}`,
		`{"ev":"exit","id":"old","code":143,"signal":"SIGTERM"}`,
		`{"ev":"pong","seq":1}`,
	} {
		out.Write(frame(ev))
	}
	got := make(chan string, 1)
	c := supervisor.NewClient(nopCloser{io.Discard}, &slowReader{r: &out}, supervisor.WithOnExit(func(id string, e supervisor.Exit) {
		got <- id + " " + e.Signal
	}))
	if err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "old SIGTERM" {
			t.Errorf("OnExit got %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnExit not called")
	}
}

// slowReader gives its frames only after a moment, so that the ping is
// pending when its answer comes.
type slowReader struct {
	r      io.Reader
	waited bool
}

func (s *slowReader) Read(p []byte) (int, error) {
	if !s.waited {
		time.Sleep(50 * time.Millisecond)
		s.waited = true
	}
	n, err := s.r.Read(p)
	if err == io.EOF {
		select {} // stay open
	}
	return n, err
}

func FuzzReadFrame(f *testing.F) {
	f.Add(frame(`{"ev":"pong"}`))
	f.Add(append(frame(`{"ev":"exit","id":"a","code":1}`), frame(`{"ev":"runs","runs":[{"id":"x","pid":3,"started":"2026-01-01T00:00:00Z"}]}`)...))
	f.Add([]byte("\xff\xff\xff\xff"))
	f.Add([]byte("\x00\x00\x00\x02{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for i := 0; i < 100; i++ {
			p, err := supervisor.ReadFrame(r)
			if err != nil {
				return
			}
			if len(p) > supervisor.MaxFrame {
				t.Fatalf("frame of %d bytes", len(p))
			}
			_, _ = supervisor.DecodeEvent(p)
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"ev":"output","id":"a","stream":"stderr","data":"aGk="}`))
	f.Add([]byte(`{"ev":"ready","pid":1,"workers":1}`))
	f.Add([]byte(`{"ev":"error","seq":3,"error":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := supervisor.DecodeEvent(b)
		if err != nil {
			if !errors.Is(err, supervisor.ErrProtocol) {
				t.Fatalf("error of no kind: %v", err)
			}
			return
		}
		if ev.Ev == "" {
			t.Fatal("an event without a name passed")
		}
	})
}
