package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// replicasFixture writes the chains of replicas r0 and r1 under one audit
// dir, as two daemons sharing a volume do, appending in turns.
func replicasFixture(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	var logs []*audit.Log
	for _, r := range []string{"r0", "r1"} {
		l, err := audit.Open(audit.ReplicaDir(root, r), audit.Options{Replica: r})
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
	}
	for i := range 6 {
		l := logs[i%2]
		if err := l.Append(context.Background(), &audit.Record{Event: audit.EventSessionCreate, SessionID: "s" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range logs {
		l.Close()
	}
	return root
}

func TestAuditVerifyReplicas(t *testing.T) {
	root := replicasFixture(t)
	out, errText, code := runAudit(t, "verify", "--dir", root)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errText)
	}
	for _, w := range []string{"CHAIN", "r0  ", "r1  ", "2 chain(s), 2 intact", "replica      r1"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	out, _, code = runAudit(t, "verify", "--dir", root, "--json")
	var v struct {
		OK     bool
		Chains []struct {
			Name   string
			OK     bool
			Report struct{ Records int }
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || !v.OK || len(v.Chains) != 2 || v.Chains[1].Name != "r1" || v.Chains[1].Report.Records != 4 {
		t.Fatalf("--json: exit %d\n%s", code, out)
	}

	// Tamper with r1's second record: r1 is named, r0 stays intact.
	p := filepath.Join(root, "r1", "audit-000001.jsonl")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(b, []byte(`"session_id":"sb"`), []byte(`"session_id":"sX"`), 1), 0o640)
	out, errText, code = runAudit(t, "verify", "--dir", root)
	if code != 1 || !strings.Contains(errText, "chain r1: first bad seq 2: changed record") || strings.Contains(errText, "chain r0") ||
		!strings.Contains(out, "2 chain(s), 1 intact") {
		t.Fatalf("tampered: exit %d\n%s\n%s", code, out, errText)
	}
	// One chain on its own still verifies.
	if _, e, c := runAudit(t, "verify", "--dir", filepath.Join(root, "r0")); c != 0 {
		t.Fatalf("chain r0 alone: exit %d %s", c, e)
	}
}

func TestAuditExportReplicas(t *testing.T) {
	root := replicasFixture(t)
	out, errText, code := runAudit(t, "export", "--dir", root, "--event", "session")
	if code != 0 {
		t.Fatalf("exit %d %s", code, errText)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m["session_id"].(string)+"@"+m["replica"].(string))
		if m["seq"] == nil {
			t.Fatalf("record without seq: %s", line)
		}
	}
	if g := strings.Join(got, " "); g != "sa@r0 sb@r1 sc@r0 sd@r1 se@r0 sf@r1" {
		t.Fatalf("merged export: %s", g)
	}
	out, _, _ = runAudit(t, "export", "--dir", root, "--replica", "r1", "--event", "session")
	if n := strings.Count(out, "\n"); n != 3 || strings.Contains(out, `"r0"`) {
		t.Fatalf("--replica r1: %d lines\n%s", n, out)
	}
	out, _, _ = runAudit(t, "query", "--dir", root, "--event", "session")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 7 || !strings.Contains(lines[0], "REPLICA") || !strings.Contains(lines[2], "r1") {
		t.Fatalf("query table:\n%s", out)
	}
	if _, e, c := runAudit(t, "tail", "--dir", root); c != 1 || !strings.Contains(e, "r0, r1") {
		t.Fatalf("tail over two chains: exit %d %s", c, e)
	}
}
