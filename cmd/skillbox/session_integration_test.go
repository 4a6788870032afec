//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/audit"
)

// sessionSkillRoot writes the skill sess-web (isolation = "session" by
// itPolicy's rule): a loopback HTTP server, a client for it, and a probe
// that reports what a run of the session can see.
func sessionSkillRoot(t *testing.T) string {
	t.Helper()
	root := extraSkill(t, "sess-web", "scripts/serve.py", `import http.server, os, sys
port = int(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from %d" % os.getpid()).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
print("serving", port, flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
`)
	files := map[string]string{
		"scripts/fetch.py": `import sys, time, urllib.request
for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 100):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:%s/" % sys.argv[1], timeout=2).read().decode()); break
    except OSError as e:
        err = e; time.sleep(0.1)
else:
    print("unreachable:", err); sys.exit(3)
`,
		"scripts/probe.py": `import json, os
procs = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try: procs.append(open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").decode())
        except OSError: pass
print(json.dumps({"procs": procs, "work": sorted(os.listdir("/work")), "tmp": sorted(os.listdir("/tmp")),
    "shm": sorted(os.listdir("/dev/shm")), "env": sorted(os.environ)}))
`,
		"scripts/mark.py": `import os, sys
open("/work/mark-" + sys.argv[1], "w").write("x")
open("/tmp/mark-" + sys.argv[1], "w").write("x")
open("/dev/shm/mark-" + sys.argv[1], "w").write("x")
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(root, "sess-web", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// sandboxProcs lists host processes whose command line names id.
func sandboxProcs(id string) string {
	out, _ := exec.Command("pgrep", "-af", id).Output()
	return strings.TrimSpace(string(out))
}

// mountsOf lists host mounts whose path names id.
func mountsOf(id string) []string {
	raw, _ := os.ReadFile("/proc/mounts")
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.Contains(l, id) {
			out = append(out, l)
		}
	}
	return out
}

// TestSessionBackgroundDaemon is issue 26's background acceptance through
// the socket: a background run serves on loopback, a later run of the
// same session fetches from it, runs.signal stops it, its log is read by
// offset; a session of another uid reaches nothing of it; closing the
// session leaves no sandbox, process or mount.
func TestSessionBackgroundDaemon(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t, sessionSkillRoot(t))
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"sess-web"}}))

	srv := must[*api.RunScriptResult](t, "background serve")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{
		SessionID: sid, Path: "scripts/serve.py", Args: []string{"8000"}, Background: true}))
	if srv.Background == nil || srv.Background.State != api.RunRunning || srv.Isolation != "session" || srv.SessionSandbox == "" {
		t.Fatalf("background start: %+v", srv)
	}
	box := srv.SessionSandbox
	got := must[*api.RunScriptResult](t, "fetch")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{SessionID: sid, Path: "scripts/fetch.py", Args: []string{"8000"}}))
	if got.ExitCode != 0 || !strings.HasPrefix(got.Stdout, "hello from ") || got.SessionSandbox != box || !got.Warm {
		t.Fatalf("fetch from the background server: %+v", got)
	}

	// The log, by offset: the first line, then the rest from where it stopped.
	first := must[*api.RunLogsResult](t, "logs")(c.RunLogs(ctx, api.Peer{}, api.RunLogsParams{SessionID: sid, RunID: srv.RunID, Length: 13}))
	if first.Data != "serving 8000\n" || first.NextOffset != 13 || first.EOF || first.State != api.RunRunning {
		t.Fatalf("first log read: %+v", first)
	}
	rest := must[*api.RunLogsResult](t, "logs")(c.RunLogs(ctx, api.Peer{}, api.RunLogsParams{SessionID: sid, RunID: srv.RunID, Offset: first.NextOffset}))
	if !strings.Contains(rest.Data, `"GET / HTTP/1.1" 200`) || rest.Offset != 13 || rest.NextOffset != rest.Size {
		t.Fatalf("second log read: %+v", rest)
	}
	list := must[*api.RunsListResult](t, "runs.list")(c.ListRuns(ctx, api.Peer{}, api.RunsListParams{SessionID: sid}))
	if len(list.Runs) != 1 || list.Runs[0].RunID != srv.RunID || list.Runs[0].State != api.RunRunning {
		t.Fatalf("runs.list: %+v", list)
	}

	// Another uid's session: its own sandbox; nothing of root's session
	// reaches it, and it cannot follow root's runs.
	out, stderr, code := d.callAsNobody(t, "sessions.create", "")
	var other api.CreateSessionResult
	if code != 0 || json.Unmarshal([]byte(out), &other) != nil {
		t.Fatalf("nobody's session: %d %s %s", code, out, stderr)
	}
	if _, stderr, code = d.callAsNobody(t, "skills.load", fmt.Sprintf(`{"session_id":%q,"names":["sess-web"]}`, other.SessionID)); code != 0 {
		t.Fatalf("nobody loads: %s", stderr)
	}
	must[*api.RunScriptResult](t, "mark")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{SessionID: sid, Path: "scripts/mark.py", Args: []string{"root"}, Env: map[string]string{"MODE": "root-secret"}}))
	out, stderr, _ = d.callAsNobody(t, "skills.run_script", fmt.Sprintf(`{"session_id":%q,"path":"scripts/fetch.py","args":["8000","5"]}`, other.SessionID))
	var res api.RunScriptResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.ExitCode != 3 || !strings.Contains(res.Stdout, "unreachable") || res.SessionSandbox == box || res.SessionSandbox == "" {
		t.Fatalf("nobody's session reached root's server: %s %s", out, stderr)
	}
	out, _, _ = d.callAsNobody(t, "skills.run_script", fmt.Sprintf(`{"session_id":%q,"path":"scripts/probe.py"}`, other.SessionID))
	res = api.RunScriptResult{}
	json.Unmarshal([]byte(out), &res)
	if res.ExitCode != 0 || strings.Contains(res.Stdout, "serve.py") || strings.Contains(res.Stdout, "mark-root") || strings.Contains(res.Stdout, "MODE") {
		t.Fatalf("nobody's session sees root's processes, files or environment: %s", out)
	}
	if _, stderr, code = d.callAsNobody(t, "runs.list", fmt.Sprintf(`{"session_id":%q}`, sid)); code != 1 || !strings.Contains(stderr, "not_found") {
		t.Fatalf("nobody lists root's runs: %d %s", code, stderr)
	}
	if _, stderr, code = d.callAsNobody(t, "runs.signal", fmt.Sprintf(`{"session_id":%q,"run_id":%q}`, other.SessionID, srv.RunID)); code != 1 || !strings.Contains(stderr, "not_found") {
		t.Fatalf("nobody signals root's run through its own session: %d %s", code, stderr)
	}

	// runs.signal stops it; runs.wait reports how.
	must[*api.BackgroundRun](t, "signal")(c.SignalRun(ctx, api.Peer{}, api.RunSignalParams{SessionID: sid, RunID: srv.RunID, Signal: "TERM"}))
	ended := must[*api.BackgroundRun](t, "wait")(c.WaitRun(ctx, api.Peer{}, api.RunWaitParams{SessionID: sid, RunID: srv.RunID, TimeoutMS: 20000}))
	if ended.State != api.RunExited || ended.ExitCode == nil || *ended.ExitCode != 143 || ended.Signal != "SIGTERM" {
		t.Fatalf("after runs.signal TERM: %+v", ended)
	}
	last := must[*api.RunLogsResult](t, "logs")(c.RunLogs(ctx, api.Peer{}, api.RunLogsParams{SessionID: sid, RunID: srv.RunID, Offset: rest.NextOffset}))
	if !last.EOF || last.State != api.RunExited {
		t.Fatalf("log after the end: %+v", last)
	}

	// A second server, then the session closes: everything goes with it.
	srv2 := must[*api.RunScriptResult](t, "background serve")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{
		SessionID: sid, Path: "scripts/serve.py", Args: []string{"8001"}, Background: true}))
	must[*api.RunScriptResult](t, "fetch")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{SessionID: sid, Path: "scripts/fetch.py", Args: []string{"8001"}}))
	if p := sandboxProcs(box); p == "" {
		t.Fatalf("no host process of sandbox %s while it runs", box)
	}
	if _, err := c.CloseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid}); err != nil {
		t.Fatal(err)
	}
	for _, id := range d.containers() {
		if id == box {
			t.Errorf("runsc still lists the session sandbox %s after sessions.close", box)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for sandboxProcs(box) != "" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if p := sandboxProcs(box); p != "" {
		t.Errorf("host processes of %s after sessions.close:\n%s", box, p)
	}
	if m := mountsOf(box); len(m) > 0 {
		t.Errorf("mounts of %s after sessions.close: %v", box, m)
	}
	d.stop()

	// Every start, end and signal is in the audit log.
	var starts, ends, signals, refused, boxes int
	for _, r := range d.records() {
		switch {
		case r.Event == audit.EventRunStart && r.Run != nil && r.Run.Background:
			starts++
		case r.Event == audit.EventRunEnd && r.Run != nil && r.Run.Background && (r.Run.RunID == srv.RunID || r.Run.RunID == srv2.RunID):
			ends++
		case r.Event == audit.EventRunSignal && r.Run != nil && r.Run.RunID == srv.RunID && r.Outcome == audit.OutcomeOK:
			signals++
		case r.Event == audit.EventRunSignal && r.Peer != nil && r.Peer.UID == 65534 && r.Outcome == audit.OutcomeRefused:
			refused++
		case r.Event == audit.EventSessionSandbox && r.Detail["sandbox"] == box:
			boxes++
		}
	}
	if starts != 2 || ends != 2 || signals != 1 || refused != 1 || boxes != 2 {
		t.Errorf("audit: %d background starts, %d ends, %d signals, %d refused signals, %d sandbox records (want 2, 2, 1, 1, 2)", starts, ends, signals, refused, boxes)
	}
}
