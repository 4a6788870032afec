//go:build integration

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// replicaDaemon is a daemon under test writing its audit chain as replica
// name under the shared audit directory shared.
func replicaDaemon(t *testing.T, shared, name string) *itDaemon {
	t.Helper()
	d := newItDaemon(t)
	b, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	old := `audit_dir   = "` + d.auditDir + `"`
	cfg := strings.Replace(string(b), old, `audit_dir   = "`+shared+`"`+"\n  replica     = \""+name+`"`, 1)
	if cfg == string(b) {
		t.Fatalf("config of the daemon under test has no %s", old)
	}
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d.auditDir = audit.ReplicaDir(shared, name)
	return d
}

// TestDaemonReplicasShareAuditDir: two daemons on one shared audit
// directory each write their own chain with their name in every record; a
// third started with a name already in use is refused and says how to fix
// it; both chains verify and export merges them.
func TestDaemonReplicasShareAuditDir(t *testing.T) {
	needDaemon(t)
	shared := t.TempDir()
	d0, d1 := replicaDaemon(t, shared, "replica-0"), replicaDaemon(t, shared, "replica-1")
	d0.start()
	d1.start()
	ctx := ctxT(t)
	for _, d := range []*itDaemon{d0, d1} {
		if _, err := d.client().CreateSession(ctx, api.Peer{}, api.CreateSessionParams{}); err != nil {
			t.Fatal(err)
		}
	}

	dup := replicaDaemon(t, shared, "replica-0")
	cmd := exec.Command(itBin, "serve", "--config", dup.cfgPath)
	done := make(chan []byte, 1)
	go func() { out, _ := cmd.CombinedOutput(); done <- out }()
	select {
	case out := <-done:
		if cmd.ProcessState.Success() || !strings.Contains(string(out), `replica name "replica-0"`) || !strings.Contains(string(out), "daemon.replica") {
			t.Errorf("a second daemon named replica-0: exit %v\n%s", cmd.ProcessState, tailLines(string(out), 20))
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("a second daemon named replica-0 was not refused within 2 minutes")
	}

	d0.stop()
	d1.stop()
	for _, d := range []*itDaemon{d0, d1} {
		want := filepath.Base(d.auditDir)
		n := 0
		for _, r := range d.records() {
			n++
			if r.Replica != want {
				t.Errorf("chain %s: seq %d (%s) has replica %q", want, r.Seq, r.Event, r.Replica)
			}
		}
		if n < 3 {
			t.Errorf("chain %s: %d records", want, n)
		}
	}
	out, code := verify(t, shared)
	if code != 0 || !strings.Contains(out, "2 chain(s), 2 intact") {
		t.Fatalf("audit verify of the shared dir: exit %d\n%s", code, out)
	}
	exp, err := exec.Command(itBin, "audit", "export", "--dir", shared, "--event", "session.create").Output()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(exp); strings.Count(s, "\n") != 2 || !strings.Contains(s, `"replica":"replica-0"`) || !strings.Contains(s, `"replica":"replica-1"`) {
		t.Fatalf("export of both replicas' sessions:\n%s", s)
	}
}
