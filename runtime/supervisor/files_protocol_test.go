package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/tarstream"
)

func TestDecodeFileRequest(t *testing.T) {
	dg := tarstream.Digest(nil)
	for _, tc := range []struct{ in, want string }{
		{`{"op":"put","seq":1,"dir":"/work","size":3,"digest":"` + dg + `","data":"YWJj"}`, ""},
		{`{"op":"put","seq":1,"dir":"/work","size":2,"digest":"` + dg + `","data":"YWJj"}`, "carries 3"},
		{`{"op":"put","seq":1,"dir":"/work","size":-1,"digest":"` + dg + `"}`, "put request of -1"},
		{`{"op":"put","seq":1,"dir":"/work","digest":"md5:00"}`, "not sha256"},
		{`{"op":"put","dir":"/work","digest":"` + dg + `"}`, "without a seq"},
		{`{"op":"put","seq":1,"digest":"` + dg + `"}`, "needs a directory"},
		{`{"op":"put_data","seq":1,"data":"YWJj","more":true}`, ""},
		{`{"op":"collect","seq":1,"dir":"/work","max_bytes":1}`, ""},
		{`{"op":"collect","seq":1,"dir":"/work"}`, "bound of 0"},
		{`{"op":"clear","seq":1,"dir":"/work"}`, ""},
		{`{"op":"clear","seq":1,"dir":"` + strings.Repeat("a", maxFileDirLen+1) + `"}`, "needs a directory"},
	} {
		_, err := DecodeRequest([]byte(tc.in))
		if (err == nil) != (tc.want == "") || (err != nil && (!strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrProtocol))) {
			t.Errorf("%.80s: got %v, want %q", tc.in, err, tc.want)
		}
	}
	big, _ := json.Marshal(Request{Op: OpPutData, Seq: 1, FileRequest: FileRequest{Data: make([]byte, PutChunk+1)}})
	if _, err := DecodeRequest(big); !errors.Is(err, ErrProtocol) {
		t.Errorf("put_data of %d bytes: %v, want refused", PutChunk+1, err)
	}
}

func TestDecodeFileEvent(t *testing.T) {
	for _, tc := range []struct {
		ev   Event
		want string
	}{
		{Event{Ev: EvCollectData, Seq: 1, Data: []byte("x")}, ""},
		{Event{Ev: EvCollectData, Data: []byte("x")}, "without a seq"},
		{Event{Ev: EvCollectData, Seq: 1, Data: make([]byte, OutputChunk+1)}, "carries"},
		{Event{Ev: EvCollected, Seq: 1, FileEvent: FileEvent{Size: -1}}, "size -1"},
		{Event{Ev: EvCollected, Seq: 1, FileEvent: FileEvent{Notes: make([]string, maxFileNotes+1)}}, "notes"},
		{Event{Ev: EvCollected, Seq: 1, FileEvent: FileEvent{Notes: []string{strings.Repeat("n", maxFileNoteLen+1)}}}, "a note of"},
		{Event{Ev: EvCleared, Seq: 1, FileEvent: FileEvent{Entries: 3}}, ""},
		{Event{Ev: EvPut, Seq: 1, FileEvent: FileEvent{Digest: strings.Repeat("d", maxFileDigest+1)}}, "digest"},
	} {
		b, _ := json.Marshal(tc.ev)
		_, err := DecodeEvent(b)
		if (err == nil) != (tc.want == "") || (err != nil && (!strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrProtocol))) {
			t.Errorf("%.80s: got %v, want %q", b, err, tc.want)
		}
	}
}

// fakeAgent is a Client over pipes whose other ends the test holds: what
// a hostile agent says is written by the test.
func fakeAgent(t *testing.T) (*Client, *io.PipeWriter, *io.PipeReader) {
	t.Helper()
	reqR, reqW := io.Pipe()
	evR, evW := io.Pipe()
	c := NewClient(reqW, evR)
	t.Cleanup(func() { c.Close(); evW.Close(); reqR.Close() })
	return c, evW, reqR
}

// A collect's agent that sends past the bound, or says another size or
// digest than it sent, is caught.
func TestCollectHostileAgent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events func(seq uint64) []Event
		want   string
	}{
		{"past the bound", func(seq uint64) []Event {
			return []Event{{Ev: EvCollectData, Seq: seq, Data: make([]byte, 600)}, {Ev: EvCollected, Seq: seq, FileEvent: FileEvent{Size: 600}}}
		}, "more than the 512 bytes"},
		{"another digest", func(seq uint64) []Event {
			return []Event{{Ev: EvCollectData, Seq: seq, Data: []byte("abc")}, {Ev: EvCollected, Seq: seq, FileEvent: FileEvent{Size: 3, Digest: tarstream.Digest([]byte("abd"))}}}
		}, "the agent says 3"},
		{"another size", func(seq uint64) []Event {
			return []Event{{Ev: EvCollectData, Seq: seq, Data: []byte("abc")}, {Ev: EvCollected, Seq: seq, FileEvent: FileEvent{Size: 2, Digest: tarstream.Digest([]byte("abc"))}}}
		}, "the agent says 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, evW, reqR := fakeAgent(t)
			go func() {
				b, err := ReadFrame(reqR)
				if err != nil {
					return
				}
				req, _ := DecodeRequest(b)
				for _, ev := range tc.events(req.Seq) {
					if WriteFrame(evW, ev) != nil {
						return
					}
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var got bytes.Buffer
			_, err := c.Collect(ctx, "/work", 512, &got)
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("collect: %v, want a protocol error with %q", err, tc.want)
			}
			if got.Len() > 512 {
				t.Errorf("%d bytes written past the bound", got.Len())
			}
		})
	}
}

// A put whose host stops sending is given up, and leaves nothing.
func TestPutAbandoned(t *testing.T) {
	old := putIdleTimeout
	putIdleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { putIdleTimeout = old })
	fs := serveFiles(t)
	seq, ch, err := fs.c.begin()
	if err != nil {
		t.Fatal(err)
	}
	defer fs.c.end(seq)
	s := rawTar(t, nil, nil)
	if err := fs.c.send(Request{Op: OpPut, Seq: seq, FileRequest: FileRequest{Dir: fs.work, Size: int64(len(s)), Digest: tarstream.Digest(s), Data: s[:10], More: true}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := fs.c.wait(ctx, OpPut, ch); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "no part of the stream") {
		t.Errorf("abandoned put: %v, want it given up", err)
	}
	empty(t, fs.work)
	// A part that comes later is for no put.
	if _, err := fs.c.call(ctx, Request{Op: OpPutData, Seq: seq, FileRequest: FileRequest{Data: s[10:]}}); err == nil {
		t.Errorf("put_data after the put was given up: no error")
	}
}

func FuzzDecodeFileRequest(f *testing.F) {
	dg := tarstream.Digest(nil)
	for _, s := range []string{
		`{"op":"put","seq":1,"dir":"/work","size":3,"digest":"` + dg + `","data":"YWJj","more":true}`,
		`{"op":"put_data","seq":1,"data":"YWJj"}`,
		`{"op":"collect","seq":2,"dir":"/work","max_bytes":100}`,
		`{"op":"clear","seq":3,"dir":"/skills/x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeRequest(b)
		if err != nil {
			return
		}
		switch req.Op {
		case OpPut, OpPutData, OpCollect, OpClear:
			if req.Seq == 0 || len(req.Data) > PutChunk || len(req.Dir) > maxFileDirLen || (req.Op == OpPut && (req.Size < 0 || !tarstream.ValidDigest(req.Digest))) {
				t.Fatalf("accepted %+v", req)
			}
		}
	})
}

func FuzzDecodeFileEvent(f *testing.F) {
	for _, s := range []string{
		`{"ev":"collect_data","seq":1,"data":"YWJj"}`,
		`{"ev":"collected","seq":1,"size":3,"digest":"sha256:00","truncated":true,"omitted":"./b","notes":["x: why"]}`,
		`{"ev":"put","seq":1,"entries":2,"size":10}`,
		`{"ev":"cleared","seq":1,"entries":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := DecodeEvent(b)
		if err != nil {
			return
		}
		switch ev.Ev {
		case EvPut, EvCollectData, EvCollected, EvCleared:
			if ev.Seq == 0 || len(ev.Data) > OutputChunk || len(ev.Notes) > maxFileNotes || ev.Size < 0 {
				t.Fatalf("accepted %+v", ev)
			}
		}
	})
}
