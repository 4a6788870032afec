//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/doors/mcp"
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
path = sys.argv[3] if len(sys.argv) > 3 else ""
for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 100):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:%s/%s" % (sys.argv[1], path), timeout=2).read().decode()); break
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
		"scripts/counter.py": `import http.server, os, random, sys
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global n
        if self.path == "/rand":
            body = "%s %r %s" % (os.urandom(8).hex(), random.random(), open("/dev/urandom", "rb").read(8).hex())
        else:
            n += 1
            body = str(n)
        self.send_response(200); self.end_headers(); self.wfile.write(body.encode())
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`,
		"scripts/upper.py": `import sys
data = open(sys.argv[1]).read()
open(sys.argv[2], "w").write(data.upper())
print(len(data))
`,
		"scripts/rand.py": `import os, random
print(os.urandom(8).hex(), repr(random.random()), open("/dev/urandom", "rb").read(8).hex())
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

// sessionDaemon starts a daemon serving sess-web (with extraConfig added
// to its configuration) and a session of root's that has it loaded.
func sessionDaemon(t *testing.T, extraConfig string) (*itDaemon, *client.Client, context.Context, string) {
	t.Helper()
	d := newItDaemon(t, sessionSkillRoot(t))
	if extraConfig != "" {
		f, err := os.OpenFile(d.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(f, extraConfig)
		f.Close()
	}
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"sess-web"}}))
	return d, c, ctx, sid
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

// TestSessionBackgroundDaemon: background runs of a session, through
// the socket: a background run serves on loopback, a later run of the
// same session fetches from it, runs.signal stops it, its log is read by
// offset; a session of another uid reaches nothing of it; closing the
// session leaves no sandbox, process or mount.
func TestSessionBackgroundDaemon(t *testing.T) {
	needDaemon(t)
	d, c, ctx, sid := sessionDaemon(t, "")

	srv := must[*api.RunScriptResult](t, "background serve")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{
		RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8000"}, Background: true},
		Path:      "scripts/serve.py",
	}))
	if srv.Background == nil || srv.Background.State != api.RunRunning || srv.Isolation != "session" || srv.SessionSandbox == "" {
		t.Fatalf("background start: %+v", srv)
	}
	box := srv.SessionSandbox
	got := must[*api.RunScriptResult](t, "fetch")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8000"}}, Path: "scripts/fetch.py"}))
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
	must[*api.RunScriptResult](t, "mark")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"root"}, Env: map[string]string{"MODE": "root-secret"}}, Path: "scripts/mark.py"}))
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
		RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8001"}, Background: true},
		Path:      "scripts/serve.py",
	}))
	must[*api.RunScriptResult](t, "fetch")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8001"}}, Path: "scripts/fetch.py"}))
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
	waitfor.Within(10*time.Second, func() bool { return sandboxProcs(box) == "" })
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

// TestSessionPauseResumeDaemon: a session paused and resumed:
// a session holding a counter in a background process and a file in
// /work is paused, the daemon restarts, and the next run sees both; two
// forks of it draw different random numbers; a checkpoint of another runsc
// build or image digest is refused saying so, and sessions.resume with
// fresh: true lets the session start anew.
func TestSessionPauseResumeDaemon(t *testing.T) {
	needDaemon(t)
	d, c, ctx, sid := sessionDaemon(t, "")
	run := func(c interface {
		RunScript(context.Context, api.Peer, api.RunScriptParams) (*api.RunScriptResult, error)
	}, sid, script string, args ...string) *api.RunScriptResult {
		t.Helper()
		return must[*api.RunScriptResult](t, script)(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: args}, Path: script}))
	}
	must[*api.RunScriptResult](t, "counter")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8002"}, Background: true}, Path: "scripts/counter.py"}))
	for i := 1; i <= 3; i++ {
		if got := strings.TrimSpace(run(c, sid, "scripts/fetch.py", "8002").Stdout); got != fmt.Sprint(i) {
			t.Fatalf("count %d: %q", i, got)
		}
	}
	run(c, sid, "scripts/mark.py", "kept")

	paused := must[*api.PauseSessionResult](t, "pause")(c.PauseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	if len(paused.Sandboxes) != 1 || paused.Sandboxes[0].Bytes <= 0 || !strings.HasPrefix(paused.Sandboxes[0].Digest, "sha256:") {
		t.Fatalf("pause: %+v", paused)
	}
	box := paused.Sandboxes[0].Sandbox
	if len(sandboxProcs(box)) > 0 {
		t.Fatalf("the paused sandbox %s still has processes: %s", box, sandboxProcs(box))
	}
	d.stop()
	d.start()
	c = d.client()

	// The restarted daemon lists the paused sandbox's background run.
	list := must[*api.RunsListResult](t, "runs.list")(c.ListRuns(ctx, api.Peer{}, api.RunsListParams{SessionID: sid}))
	if len(list.Runs) != 1 || list.Runs[0].State != api.RunRunning || !list.Runs[0].Paused || list.Runs[0].Path != "scripts/counter.py" {
		t.Fatalf("runs.list after the restart: %+v", list.Runs)
	}
	if got := strings.TrimSpace(run(c, sid, "scripts/fetch.py", "8002").Stdout); got != "4" {
		t.Fatalf("after pause and a daemon restart the counter is %q, want 4", got)
	}
	if probe := run(c, sid, "scripts/probe.py"); !strings.Contains(probe.Stdout, "mark-kept") || probe.SessionSandbox != box {
		t.Fatalf("after the restart /work lacks its file, or another sandbox ran: %+v", probe)
	}
	if list := must[*api.RunsListResult](t, "runs.list")(c.ListRuns(ctx, api.Peer{}, api.RunsListParams{SessionID: sid})); len(list.Runs) != 1 || list.Runs[0].Paused {
		t.Fatalf("runs.list after the resume: %+v", list.Runs)
	}

	// Two forks: each counts on from 4 by itself, and draws its own
	// random numbers.
	var rands [][]string
	var forks []string
	for i := 0; i < 2; i++ {
		f := must[*api.ForkSessionResult](t, "fork")(c.ForkSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
		if f.From != sid || len(f.Sandboxes) != 1 || f.SessionID == sid {
			t.Fatalf("fork: %+v", f)
		}
		forks = append(forks, f.SessionID)
		if got := strings.TrimSpace(run(c, f.SessionID, "scripts/fetch.py", "8002").Stdout); got != "5" {
			t.Fatalf("fork %d counts %q, want 5", i, got)
		}
		old := strings.Fields(run(c, f.SessionID, "scripts/fetch.py", "8002", "100", "rand").Stdout)
		fresh := strings.Fields(run(c, f.SessionID, "scripts/rand.py").Stdout)
		if len(old) != 3 || len(fresh) != 3 {
			t.Fatalf("fork %d random draws: %q %q", i, old, fresh)
		}
		rands = append(rands, old, fresh)
	}
	if got := strings.TrimSpace(run(c, sid, "scripts/fetch.py", "8002").Stdout); got != "5" {
		t.Fatalf("the source session after two forks counts %q, want 5", got)
	}
	for _, k := range []int{0, 2} { // os.urandom, /dev/urandom of the process that lived through it
		if rands[0][k] == rands[2][k] {
			t.Errorf("two forks' counter process drew the same kernel randomness: %q %q", rands[0], rands[2])
		}
	}
	for k := 0; k < 3; k++ { // a new run: os.urandom, random, /dev/urandom
		if rands[1][k] == rands[3][k] {
			t.Errorf("new runs in two forks drew the same numbers: %q %q", rands[1], rands[3])
		}
	}

	// A checkpoint of another runsc build, and one of another image digest.
	for i, tc := range []struct{ field, value, want string }{
		{"runsc_version", "runsc version release-20990101.0", "runsc"},
		{"image_digest", "sha256:" + strings.Repeat("0", 64), "image"},
	} {
		p := must[*api.PauseSessionResult](t, "pause fork")(c.PauseSession(ctx, api.Peer{}, api.SessionParams{SessionID: forks[i]}))
		mf := filepath.Join(d.stateDir, "checkpoints", p.Sandboxes[0].Checkpoint, "manifest.json")
		var m map[string]any
		raw, err := os.ReadFile(mf)
		if err != nil || json.Unmarshal(raw, &m) != nil {
			t.Fatalf("manifest %s: %v", mf, err)
		}
		m[tc.field] = tc.value
		raw, _ = json.Marshal(m)
		if err := os.WriteFile(mf, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: forks[i]}, Path: "scripts/rand.py"})
		e := wantKind(t, "run after a changed "+tc.field, err, api.KindUnavailable)
		if !strings.Contains(e.Message, tc.want) || !strings.Contains(e.Message, tc.value) || !strings.Contains(e.Message, "fresh: true") {
			t.Fatalf("refusal of a checkpoint with another %s: %s", tc.field, e.Message)
		}
		must[*api.ResumeSessionResult](t, "resume fresh")(c.ResumeSession(ctx, api.Peer{}, api.ResumeSessionParams{SessionID: forks[i], Fresh: true}))
		if r := run(c, forks[i], "scripts/rand.py"); r.ExitCode != 0 || r.SessionSandbox == p.Sandboxes[0].Sandbox {
			t.Fatalf("after resume fresh: %+v", r)
		}
	}
	for _, s := range append(forks, sid) {
		must[*api.CloseSessionResult](t, "close")(c.CloseSession(ctx, api.Peer{}, api.SessionParams{SessionID: s}))
	}
	if left, _ := os.ReadDir(filepath.Join(d.stateDir, "checkpoints")); len(left) != 0 {
		t.Errorf("checkpoints left after every session closed: %v", left)
	}
	d.stop()
	var ck, rs, fk int
	for _, r := range d.records() {
		if r.Detail["digest"] == "" || r.Outcome != audit.OutcomeOK {
			continue
		}
		switch r.Event {
		case audit.EventSessionCheckpoint:
			ck++
		case audit.EventSessionRestore:
			rs++
		case audit.EventSessionFork:
			fk++
		}
	}
	if ck < 3 || rs < 1 || fk != 2 {
		t.Errorf("audit: %d checkpoints, %d restores, %d forks with digests (want >= 3, >= 1, 2)", ck, rs, fk)
	}
}

// TestSessionIdlePause: a session sandbox idle for sessions.idle_timeout is
// checkpointed (audited, its processes gone), and the next run restores
// it with its background process's memory.
func TestSessionIdlePause(t *testing.T) {
	needDaemon(t)
	d, c, ctx, sid := sessionDaemon(t, `sessions { idle_timeout = "2s" }`)
	bg := must[*api.RunScriptResult](t, "counter")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8003"}, Background: true}, Path: "scripts/counter.py"}))
	fetch := func() string {
		r := must[*api.RunScriptResult](t, "fetch")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8003"}}, Path: "scripts/fetch.py"}))
		return strings.TrimSpace(r.Stdout)
	}
	if got := fetch(); got != "1" {
		t.Fatalf("count: %q", got)
	}
	box := bg.SessionSandbox
	waitfor.True(t, "sandbox "+box+" to be checkpointed on idling (idle_timeout 2s)", 30*time.Second, func() bool {
		for _, r := range d.records() {
			if r.Event == audit.EventSessionCheckpoint && r.Detail["sandbox"] == box && r.Detail["why"] == "idle" && r.Outcome == audit.OutcomeOK {
				return true
			}
		}
		return false
	})
	if p := sandboxProcs(box); p != "" {
		t.Fatalf("processes of the paused sandbox %s: %s", box, p)
	}
	if got := fetch(); got != "2" {
		t.Fatalf("after the idle pause the counter is %q, want 2", got)
	}
}

// TestMCPBackgroundRuns: the background runs of a session sandbox through
// `skillbox mcp` and the official Go SDK's client: a server started in the
// background, fetched by a later run, its log read by offset, signalled and
// waited for; the connection's end takes the sandbox with it.
func TestMCPBackgroundRuns(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python")
	f := newMCPFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.Command(itBin, "mcp", "--root", sessionSkillRoot(t), "--config", f.cfgPath)
	cmd.Env = append(os.Environ(), "SKILLBOX_IMAGES="+itImages)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "skillbox-go-test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to skillbox mcp: %v", err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any, out any) string {
		t.Helper()
		res, text := mcpCallTool(t, ctx, cs, name, args)
		if res.IsError {
			t.Fatalf("%s: %s", name, text)
		}
		sc, _ := json.Marshal(res.StructuredContent)
		if out != nil {
			if err := json.Unmarshal(sc, out); err != nil {
				t.Fatalf("%s: %v: %s", name, err, sc)
			}
		}
		return string(sc)
	}
	call("skills_load", map[string]any{"names": []string{"sess-web"}}, nil)
	var started struct {
		Background *api.BackgroundRun `json:"background"`
	}
	call("skills_run_script", map[string]any{"path": "scripts/serve.py", "args": []string{"8000"}, "background": true}, &started)
	if started.Background == nil || started.Background.State != api.RunRunning {
		t.Fatalf("background start: %+v", started)
	}
	id, box := started.Background.RunID, started.Background.SessionSandbox
	var fetched struct {
		Stdout string `json:"stdout"`
	}
	call("skills_run_script", map[string]any{"path": "scripts/fetch.py", "args": []string{"8000"}}, &fetched)
	if !strings.HasPrefix(fetched.Stdout, "hello from ") {
		t.Fatalf("fetch: %+v", fetched)
	}
	var logs api.RunLogsResult
	call("runs_logs", map[string]any{"run_id": id, "length": 13}, &logs)
	if logs.Data != "serving 8000\n" || logs.NextOffset != 13 {
		t.Fatalf("runs_logs: %+v", logs)
	}
	var list mcp.RunsListOutput
	call("runs_list", map[string]any{}, &list)
	if len(list.Runs) != 1 || list.Runs[0].RunID != id {
		t.Fatalf("runs_list: %+v", list)
	}
	call("runs_signal", map[string]any{"run_id": id, "signal": "TERM"}, nil)
	var ended api.BackgroundRun
	call("runs_wait", map[string]any{"run_id": id, "timeout_ms": 20000}, &ended)
	if ended.State != api.RunExited || ended.ExitCode == nil || *ended.ExitCode != 143 {
		t.Fatalf("runs_wait after TERM: %+v", ended)
	}
	cs.Close()
	cmd.Wait()
	waitfor.Within(10*time.Second, func() bool { return sandboxProcs(box) == "" })
	if p := sandboxProcs(box); p != "" {
		t.Errorf("host processes of %s after the MCP connection ended:\n%s", box, p)
	}
}

// TestSessionWorkspace: runs in a session sandbox work on the session's
// workspace as fresh-sandbox runs do: its files come in, what a run writes
// goes back, and a file an earlier run left in the sandbox's /work is
// replaced by the workspace's newer version.
func TestSessionWorkspace(t *testing.T) {
	needDaemon(t)
	_, c, ctx, sid := sessionDaemon(t, "")
	write := func(path, data string) {
		must[*api.WorkspaceWriteResult](t, "workspace.write")(c.WriteWorkspace(ctx, api.Peer{}, api.WorkspaceWriteParams{SessionID: sid, Path: path, Data: []byte(data), Truncate: true}))
	}
	read := func(path string) string {
		r := must[*api.WorkspaceReadResult](t, "workspace.read")(c.ReadWorkspace(ctx, api.Peer{}, api.WorkspaceReadParams{SessionID: sid, Path: path}))
		return string(r.Data)
	}
	for i, in := range []string{"first version", "second, longer version"} {
		write("notes/in.txt", in)
		r := must[*api.RunScriptResult](t, "upper")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"notes/in.txt", "notes/out.txt"}}, Path: "scripts/upper.py"}))
		if r.ExitCode != 0 || r.Isolation != "session" || r.Workspace == nil {
			t.Fatalf("run %d: %+v", i, r)
		}
		if got := read("notes/out.txt"); got != strings.ToUpper(in) {
			t.Fatalf("run %d wrote back %q, want %q", i, got, strings.ToUpper(in))
		}
		if len(r.Outputs) != 1 || r.Outputs[0].Path != "notes/out.txt" {
			t.Fatalf("run %d outputs: %+v", i, r.Outputs)
		}
	}
}
