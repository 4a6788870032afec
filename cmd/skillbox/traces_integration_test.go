//go:build integration

package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/frame/tracing"
	"github.com/skillbox/skillbox/sandbox/frame/tracing/tracingtest"
)

// TestDaemonTraces: `skillbox serve` with daemon { traces = "http://…" }
// sends a collector on loopback one trace per real gVisor run, from the
// call's root span through policy, image, layer, sandbox boot, delivery
// and wait to the audit appends, and each run's audit records name it.
func TestDaemonTraces(t *testing.T) {
	needDaemon(t)
	col := tracingtest.Start()
	defer col.Close()
	d := newItDaemon(t, extraSkill(t, "traced", "scripts/exit.sh", "echo ran\nexit \"$1\"\n"))
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	withTraces := strings.Replace(string(cfg), "daemon {\n", "daemon {\n  traces      = \""+col.URL+"\"\n", 1)
	if err := os.WriteFile(d.cfgPath, []byte(withTraces), 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"traced"}}))
	var runIDs []string
	for _, code := range []string{"0", "3"} {
		res := must[*api.RunScriptResult](t, "run_script")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{code}}, Path: "scripts/exit.sh"}))
		if res.ExitCode != int(code[0]-'0') {
			t.Fatalf("run exit %s: exit %d (%s)", code, res.ExitCode, res.Stderr)
		}
		runIDs = append(runIDs, res.RunID)
	}
	d.stop() // sends the spans still batched

	if err := col.Err(); err != nil {
		t.Fatal(err)
	}
	if svc := col.Services(); !svc[tracing.ServiceName] {
		t.Errorf("service.name of the spans: %v", svc)
	}
	runs := tracingtest.ByTrace(col.Spans(), "skills.run_script")
	if len(runs) != len(runIDs) {
		t.Fatalf("collector got %d run traces, want %d", len(runs), len(runIDs))
	}
	traceOf := map[string]string{}
	for _, r := range d.records() {
		if r.Run != nil && (r.Event == audit.EventRunStart || r.Event == audit.EventRunEnd) {
			if prev, ok := traceOf[r.Run.RunID]; ok && prev != r.TraceID {
				t.Errorf("run %s: run.start names trace %q, run.end %q", r.Run.RunID, prev, r.TraceID)
			}
			traceOf[r.Run.RunID] = r.TraceID
		}
	}
	// A daemon with a warm pool asks it first (pool.claim); the rest is
	// the same on every backend.
	want := []string{
		"skills.run_script > policy.decide", "policy.decide > audit.append policy.decision",
		"skills.run_script > image.resolve", "skills.run_script > deps.layer",
		"skills.run_script > audit.append run.start", "skills.run_script > sandbox.run",
		"sandbox.run > sandbox.boot", "sandbox.run > sandbox.deliver", "sandbox.run > sandbox.wait",
		"skills.run_script > audit.append run.end",
	}
	for _, id := range runIDs {
		spans, ok := runs[traceOf[id]]
		if !ok {
			t.Errorf("run %s names trace %q, which the collector did not get", id, traceOf[id])
			continue
		}
		got := tracingtest.Tree(spans)
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("run %s: no %q in its trace:\n  %s", id, w, strings.Join(got, "\n  "))
			}
		}
		for _, s := range spans {
			if s.Name == "sandbox.run" && s.Attrs["skillbox.runtime"] != "runsc" {
				t.Errorf("sandbox.run attributes %v", s.Attrs)
			}
		}
	}
}
