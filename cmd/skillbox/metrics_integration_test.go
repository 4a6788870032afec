//go:build integration

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/frame/metrics/metricstest"
)

// TestDaemonMetrics: `skillbox serve` with daemon { metrics = "unix:…" }
// serves its metrics on a socket of the main socket's mode, and after a
// fixed set of real gVisor runs a scrape shows exactly those runs and
// sessions.
func TestDaemonMetrics(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t, extraSkill(t, "metered", "scripts/exit.sh", "echo ran\nexit \"$1\"\n"))
	sock := filepath.Join(d.base, "run", "metrics.sock")
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	withMetrics := strings.Replace(string(cfg), "daemon {\n", "daemon {\n  metrics     = \"unix:"+sock+"\"\n", 1)
	if err := os.WriteFile(d.cfgPath, []byte(withMetrics), 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("metrics socket %v, %v: want the main socket's mode 0666", fi, err)
	}
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"metered"}}))
	for _, code := range []string{"0", "0", "3"} {
		res := must[*api.RunScriptResult](t, "run_script")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{code}}, Path: "scripts/exit.sh"}))
		if res.ExitCode != int(code[0]-'0') || res.Warm {
			t.Fatalf("run exit %s: exit %d warm %v (%s)", code, res.ExitCode, res.Warm, res.Stderr)
		}
	}

	got := metricstest.Flatten(metricstest.Scrape(t, sock), "skillbox_")
	want := map[string]float64{
		`skillbox_runs_total{outcome="ok",reason="exit",skill="metered"}`:     2,
		`skillbox_runs_total{outcome="failed",reason="exit",skill="metered"}`: 1,
		`skillbox_run_duration_seconds_count{skill="metered",start="cold"}`:   3,
		`skillbox_sessions_open{}`:               2,
		`skillbox_audit_append_failures_total{}`: 0,
	}
	// Timed values, and the audit's count of records, are not fixed.
	only := func(k string) bool { _, ok := want[k]; return !ok }
	metricstest.CheckExact(t, got, want, only)
	if got[`skillbox_audit_append_duration_seconds_count{}`] < 10 {
		t.Errorf("audit appends counted: %v", got[`skillbox_audit_append_duration_seconds_count{}`])
	}
	d.stop()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the metrics socket is left after the daemon stopped: %v", err)
	}
}
