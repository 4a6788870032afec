package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a fake time source tests step by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// replicaLog opens the chain of replica under root with a fake clock.
func replicaLog(t *testing.T, root, replica string, c *clock) *Log {
	t.Helper()
	l, err := openLog(ReplicaDir(root, replica), Options{Replica: replica, Logger: quiet()}.withDefaults(ReplicaDir(root, replica)), osFS{}, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// at appends a session.create for session id at time t.
func at(t *testing.T, l *Log, c *clock, sec int, id string) {
	t.Helper()
	c.set(t0.Add(time.Duration(sec) * time.Second))
	if err := l.Append(context.Background(), &Record{Event: EventSessionCreate, SessionID: id}); err != nil {
		t.Fatal(err)
	}
}

// twoReplicas writes chains a and b under one root, interleaved in time,
// with a tie at second 3.
func twoReplicas(t *testing.T) string {
	root := t.TempDir()
	ca, cb := &clock{t: t0}, &clock{t: t0.Add(500 * time.Millisecond)}
	a := replicaLog(t, root, "a", ca)
	b := replicaLog(t, root, "b", cb)
	at(t, a, ca, 1, "a1")
	at(t, b, cb, 2, "b1")
	at(t, b, cb, 3, "b2")
	at(t, a, ca, 3, "a2")
	at(t, a, ca, 4, "a3")
	at(t, b, cb, 5, "b3")
	a.Close()
	b.Close()
	return root
}

func TestChains(t *testing.T) {
	root := twoReplicas(t)
	// A log from before replicas in the root itself is a chain too; a
	// directory without log files is not.
	l := openT(t, root, Options{})
	l.Close()
	os.Mkdir(filepath.Join(root, "lost+found"), 0o700)
	cs, err := Chains(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := chainNames(cs); got != "., a, b" {
		t.Fatalf("chains %q, want \"., a, b\"", got)
	}
	if cs, _ := Chains(filepath.Join(root, "none")); len(cs) != 0 {
		t.Fatalf("a missing dir has chains %v", cs)
	}
}

func TestVerifyAll(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper string // chain whose second line is edited
	}{
		{"intact", ""},
		{"a tampered", "a"},
		{"b tampered", "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := twoReplicas(t)
			if tc.tamper != "" {
				p := filepath.Join(root, tc.tamper, fileName(1))
				b, _ := os.ReadFile(p)
				lines := bytes.SplitAfter(b, []byte("\n"))
				lines[1] = bytes.Replace(lines[1], []byte(`"session_id":"`+tc.tamper+`1"`), []byte(`"session_id":"x"`), 1)
				os.WriteFile(p, bytes.Join(lines, nil), 0o640)
			}
			res, err := VerifyAll(root, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 2 || res[0].Name != "a" || res[1].Name != "b" {
				t.Fatalf("results %+v", res)
			}
			for _, r := range res {
				bad := r.Name == tc.tamper
				if r.OK() == bad {
					t.Errorf("chain %s: ok=%v failure=%v err=%v", r.Name, r.OK(), r.Failure, r.Err)
				}
				if bad && (r.Failure.Seq != 2 || r.Failure.Reason != ReasonChanged) {
					t.Errorf("chain %s: failure %v, want changed record at seq 2", r.Name, r.Failure)
				}
				if !bad && (r.Report.Records != 4 || strings.Join(r.Report.Replicas, ",") != r.Name) {
					t.Errorf("chain %s: %d records, replicas %v", r.Name, r.Report.Records, r.Report.Replicas)
				}
			}
		})
	}
	if _, err := Verify(twoReplicas(t), VerifyOptions{}); !errors.Is(err, ErrNoLog) || !strings.Contains(err.Error(), "a, b") {
		t.Fatalf("Verify of a dir of chains: %v, want ErrNoLog naming them", err)
	}
	if _, err := VerifyAll(t.TempDir(), VerifyOptions{}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("empty root: %v, want ErrNoLog", err)
	}
}

// TestVerifyAllCheckpoints: one checkpoints file holding both chains'
// checkpoints verifies both; a checkpoint of a chain that is gone is named.
func TestVerifyAllCheckpoints(t *testing.T) {
	root := t.TempDir()
	keyPath := filepath.Join(t.TempDir(), "k")
	pub, err := GenerateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := LoadPrivateKey(keyPath)
	cps := filepath.Join(t.TempDir(), "checkpoints.jsonl")
	for _, r := range []string{"a", "b"} {
		l := openT(t, ReplicaDir(root, r), Options{Replica: r, SigningKey: priv, CheckpointEvery: -1, CheckpointFile: cps})
		appendN(t, l, 3)
		l.Close()
	}
	res, err := VerifyAll(root, VerifyOptions{PublicKey: pub, Checkpoints: cps})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.OK() || r.Report.FileCheckpoints != 1 {
			t.Errorf("chain %s: ok=%v %v, %d file checkpoints", r.Name, r.OK(), r.Failure, r.Report.FileCheckpoints)
		}
	}
	os.Rename(filepath.Join(root, "b"), filepath.Join(t.TempDir(), "b"))
	os.MkdirAll(filepath.Join(root, "c"), 0o750)
	l := openT(t, ReplicaDir(root, "c"), Options{Replica: "c"})
	l.Close()
	var te *TamperError
	if _, err := VerifyAll(root, VerifyOptions{PublicKey: pub, Checkpoints: cps}); !errors.As(err, &te) || te.Reason != ReasonLogReplaced {
		t.Fatalf("a chain removed: %v, want %q", err, ReasonLogReplaced)
	}
}

func TestScanMergesByTime(t *testing.T) {
	root := twoReplicas(t)
	var got []string
	err := Scan(root, func(e *Entry) error {
		if e.Chain != e.Record.Replica {
			t.Errorf("entry of chain %q has replica %q", e.Chain, e.Record.Replica)
		}
		got = append(got, fmt.Sprintf("%s/%d/%s", e.Record.Replica, e.Record.Seq, e.Record.SessionID))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Genesis records at 0 and 0.5 s; b2 and a2 tie at 3 s: a first.
	want := "a/1/ b/1/ a/2/a1 b/2/b1 a/3/a2 b/3/b2 a/4/a3 b/4/b3"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("merged order\n got %s\nwant %s", g, want)
	}
	// Filters keep working on the merge, and the replica is one.
	var n int
	f := Filter{Replica: "b", Event: "session"}
	Scan(root, func(e *Entry) error {
		if f.Match(e.Record) {
			n++
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("replica b sessions: %d, want 3", n)
	}
}

// TestScanKeepsChainOrder: a chain whose clock went back still comes out
// in its own seq order.
func TestScanKeepsChainOrder(t *testing.T) {
	root := t.TempDir()
	ca, cb := &clock{t: t0}, &clock{t: t0}
	a := replicaLog(t, root, "a", ca)
	b := replicaLog(t, root, "b", cb)
	at(t, a, ca, 10, "a1")
	at(t, a, ca, 2, "a2") // the clock stepped back
	at(t, b, cb, 5, "b1")
	a.Close()
	b.Close()
	var got []string
	Scan(root, func(e *Entry) error { got = append(got, e.Record.SessionID); return nil })
	if g := strings.Join(got, ","); g != ",,b1,a1,a2" {
		t.Fatalf("order %q", g)
	}
}

func TestExportMerged(t *testing.T) {
	root := twoReplicas(t)
	var buf bytes.Buffer
	n, err := Export(&buf, root, Filter{Event: "session.create"})
	if err != nil || n != 6 {
		t.Fatalf("Export: %d, %v", n, err)
	}
	want := []string{`"replica":"a"`, `"replica":"b"`, `"replica":"a"`, `"replica":"b"`, `"replica":"a"`, `"replica":"b"`} // the tie at 3 s: a first
	for i, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if !strings.Contains(line, want[i]) || !strings.Contains(line, `"seq":`) {
			t.Errorf("line %d: %s, want %s", i, line, want[i])
		}
	}
}

func TestTailRefusesSeveralChains(t *testing.T) {
	root := twoReplicas(t)
	err := Tail(context.Background(), root, TailOptions{N: 1}, func(*Entry) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "a, b") {
		t.Fatalf("Tail over two chains: %v", err)
	}
	var got []string
	if err := Tail(context.Background(), ReplicaDir(root, "b"), TailOptions{N: 1}, func(e *Entry) error {
		got = append(got, e.Record.SessionID)
		return nil
	}); err != nil || strings.Join(got, ",") != "b3" {
		t.Fatalf("Tail of chain b: %v, %v", got, err)
	}
}

// TestTwoWritersOneSharedDir is two replicas' logs on one shared audit
// directory, appending at once: both chains verify, and the merge holds
// every record once.
func TestTwoWritersOneSharedDir(t *testing.T) {
	root := t.TempDir()
	var wg sync.WaitGroup
	for _, r := range []string{"skillbox-0", "skillbox-1"} {
		l := openT(t, ReplicaDir(root, r), Options{Replica: r, RotateBytes: 4096})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.Close()
			for i := range 200 {
				if err := l.Append(context.Background(), &Record{Event: EventSessionCreate, SessionID: fmt.Sprint(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	res, err := VerifyAll(root, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.OK() {
			t.Errorf("chain %s: %v %v", r.Name, r.Failure, r.Err)
		}
	}
	n := 0
	var last time.Time
	Scan(root, func(e *Entry) error {
		if e.Record.Time.Before(last) {
			t.Errorf("merge goes back in time at %s seq %d", e.Chain, e.Record.Seq)
		}
		last = e.Record.Time
		if e.Record.Event == EventSessionCreate {
			n++
		}
		return nil
	})
	if len(res) != 2 || n != 400 {
		t.Fatalf("%d chains, %d records, want 2 and 400", len(res), n)
	}
}
