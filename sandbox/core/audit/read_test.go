package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
)

func TestFilter(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendN(t, l, 40)
	uid0 := uint32(0)
	l.Append(context.Background(), &Record{Event: EventAuthRefused, Peer: &api.Peer{UID: 0, PID: 1}, Outcome: OutcomeRefused, Error: "not allowed"})
	l.Append(context.Background(), &Record{Event: EventSkillLoad, Skills: []SkillRef{{Name: "a"}, {Name: "pdf-tools-3"}}})
	l.Close()
	count := func(f Filter) int {
		n := 0
		if err := Read(dir, func(r *Record) error {
			if f.Match(r) {
				n++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cases := []struct {
		name string
		f    Filter
		want int
	}{
		{"all", Filter{}, 43},
		{"exact event", Filter{Event: EventRunEnd}, 20},
		{"event family", Filter{Event: "run"}, 40},
		{"event glob", Filter{Event: "run.*"}, 40},
		{"event list", Filter{Event: "run.start, auth.refused"}, 21},
		{"session", Filter{SessionID: "sess_0003"}, 1},
		{"skill also in skills", Filter{Skill: "pdf-tools-3"}, 7},
		{"uid", Filter{UID: &uid0}, 1},
		{"since future", Filter{Since: time.Now().Add(time.Hour)}, 0},
		{"until past", Filter{Until: time.Now().Add(-time.Hour)}, 0},
		{"window", Filter{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour), Event: "audit"}, 1},
	}
	for _, c := range cases {
		if got := count(c.f); got != c.want {
			t.Errorf("%s: %d records, want %d", c.name, got, c.want)
		}
	}
}

func TestExportFlat(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendN(t, l, 4)
	l.Close()
	var buf bytes.Buffer
	n, err := Export(&buf, dir, Filter{Event: EventRunEnd})
	if err != nil || n != 2 {
		t.Fatalf("%d %v", n, err)
	}
	sc := bufio.NewScanner(&buf)
	lines := 0
	for sc.Scan() {
		lines++
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			if _, nested := v.(map[string]any); nested {
				t.Fatalf("key %s is still an object", k)
			}
		}
		if m["peer.uid"] != float64(1000) || m["run.exit_code"] == nil || m["run.limits.timeout_ms"] != float64(30000) || m["event"] != EventRunEnd {
			t.Fatalf("flat record %v", m)
		}
		outs := m["run.outputs"].([]any)
		if outs[0].(map[string]any)["path"] != "outputs/tables.csv" {
			t.Fatalf("outputs %v", outs)
		}
		if m["hash"] == nil || m["prev_hash"] == nil {
			t.Fatal("export must keep the chain fields for cross-checking")
		}
	}
	if lines != 2 {
		t.Fatalf("%d lines", lines)
	}
}

func TestTail(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{RotateBytes: 4 << 10})
	appendN(t, l, 20)
	var got []uint64
	err := Tail(context.Background(), dir, TailOptions{N: 7}, func(e *Entry) error {
		got = append(got, e.Record.Seq)
		return nil
	})
	head, _ := l.Head()
	if err != nil || len(got) != 7 || got[6] != head || got[0] != head-6 {
		t.Fatalf("tail -n 7: %v %v (head %d)", got, err, head)
	}
	got = nil
	Tail(context.Background(), dir, TailOptions{N: 1000}, func(e *Entry) error { got = append(got, e.Record.Seq); return nil })
	if len(got) != int(head) || got[0] != 1 {
		t.Fatalf("tail -n 1000: %d records", len(got))
	}

	// Follow across rotations while appending.
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var followed []uint64
	done := make(chan error)
	go func() {
		done <- Tail(ctx, dir, TailOptions{N: 2, Follow: true, Poll: 5 * time.Millisecond}, func(e *Entry) error {
			mu.Lock()
			followed = append(followed, e.Record.Seq)
			mu.Unlock()
			return nil
		})
	}()
	// the last two, before anything new is written
	waitfor.NoError(t, "tail -f to deliver 2 records", 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if k := len(followed); k < 2 {
			return fmt.Errorf("tail -f delivered %d records", k)
		}
		return nil
	})
	for i := 0; i < 6; i++ {
		appendN(t, l, 5)
		time.Sleep(7 * time.Millisecond) // the follower meets the new records over several polls
	}
	last, _ := l.Head()
	waitfor.NoError(t, "the follow to reach the head", 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		var tip uint64
		if n := len(followed); n > 0 {
			tip = followed[n-1]
		}
		if tip != last {
			return fmt.Errorf("follow reached %d of %d", tip, last)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l.Close()
	for i, s := range followed {
		if s != head-1+uint64(i) {
			t.Fatalf("followed seqs not contiguous at %d: %v", i, followed)
		}
	}
	files, _ := listFiles(dir)
	if len(files) < 3 {
		t.Fatalf("test did not rotate: %d files", len(files))
	}
}

func TestSummary(t *testing.T) {
	code := 137
	r := &Record{Run: &RunInfo{ExitCode: &code, Reason: "oom", Signal: "SIGKILL"}}
	if s := r.Summary(); s != "oom 137 (SIGKILL)" {
		t.Fatal(s)
	}
	r = &Record{Decision: &DecisionInfo{Effect: "deny", Rule: "no-net"}}
	if s := r.Summary(); s != "deny rule=no-net" {
		t.Fatal(s)
	}
	r = &Record{Outcome: OutcomeRefused, Error: "path escapes the skill"}
	if s := r.Summary(); s != "refused: path escapes the skill" {
		t.Fatal(s)
	}
}
