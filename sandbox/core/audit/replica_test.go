package audit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestReplicaInEveryRecord: with a replica name, every record — the
// caller's and the log's own — carries it, under the hash; without one,
// records have no replica member, as before replicas existed.
func TestReplicaInEveryRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replica string
	}{
		{"named", "skillbox-0"},
		{"unnamed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openT(t, dir, Options{Replica: tc.replica, RotateBytes: 600})
			ctx := context.Background()
			for range 5 {
				r := &Record{Event: EventSessionCreate, SessionID: "s1"}
				if err := l.Append(ctx, r); err != nil {
					t.Fatal(err)
				}
				if r.Replica != tc.replica {
					t.Fatalf("Append filled replica %q, want %q", r.Replica, tc.replica)
				}
			}
			l.Close()
			n := 0
			err := Scan(dir, func(e *Entry) error {
				n++
				if e.Record.Replica != tc.replica {
					t.Errorf("seq %d (%s): replica %q, want %q", e.Record.Seq, e.Record.Event, e.Record.Replica, tc.replica)
				}
				if has := bytes.Contains(e.Raw, []byte(`"replica":`)); has != (tc.replica != "") {
					t.Errorf("seq %d: replica member present=%v: %s", e.Record.Seq, has, e.Raw)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n < 6 {
				t.Fatalf("%d records, want the genesis, rotations and 5 appends", n)
			}
			if _, err := Verify(dir, VerifyOptions{}); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}

// TestReplicaCoveredByHash: changing a record's replica breaks its hash.
func TestReplicaCoveredByHash(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{Replica: "a"})
	if err := l.Append(context.Background(), &Record{Event: EventSessionCreate}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	b, err := os.ReadFile(file1(dir))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`"replica":"a"`), []byte(`"replica":"b"`), 1)
	if err := os.WriteFile(file1(dir), b, 0o640); err != nil {
		t.Fatal(err)
	}
	var te *TamperError
	if _, err := Verify(dir, VerifyOptions{}); !errors.As(err, &te) || te.Reason != ReasonChanged || te.Seq != 1 {
		t.Fatalf("Verify after editing the replica: %v, want changed record at seq 1", err)
	}
}

// TestOldLogGoesOnWithReplica: a log written without replica names (before
// replicas) is continued by a named writer; old and new records verify.
func TestOldLogGoesOnWithReplica(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	l.Append(context.Background(), &Record{Event: EventSessionCreate})
	l.Close()
	l = openT(t, dir, Options{Replica: "host-1"})
	l.Append(context.Background(), &Record{Event: EventSessionClose})
	l.Close()
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 3 || strings.Join(rep.Replicas, ",") != "host-1" {
		t.Fatalf("report: %d records, replicas %q", rep.Records, rep.Replicas)
	}
}

func TestReplicaLock(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{Replica: "r1"})
	defer l.Close()
	_, err := Open(dir, Options{Replica: "r1", Logger: quiet()})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second writer of replica r1: %v, want ErrLocked", err)
	}
	for _, want := range []string{`replica name "r1"`, "daemon.replica", "pid "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestBadReplicaRefused(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{Replica: "../x", Logger: quiet()}); err == nil {
		t.Fatal("Open with replica ../x worked")
	}
}
