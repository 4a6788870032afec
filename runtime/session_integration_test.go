//go:build integration

package runtime_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// sessionEnv is what a session sandbox test mounts: a skills dir with one
// skill ("tool", linked into the snapshot store) and the supervisor.
type sessionEnv struct {
	rt        runtime.Runtime
	opts      runtime.Options
	skillsDir string
	snapshots string
	sup       string
}

func newSessionEnv(t testing.TB) *sessionEnv {
	t.Helper()
	sup := os.Getenv("SKILLBOX_BIN")
	if sup == "" {
		runtimetest.SkipUnlessRequired(t, "needs SKILLBOX_BIN, the skillbox binary run as the session supervisor")
		t.Skip("SKILLBOX_BIN not set")
	}
	sup, _ = filepath.Abs(sup)
	rt, opts := newBackend(t, "runsc")
	dir := t.TempDir()
	env := &sessionEnv{rt: rt, opts: opts, skillsDir: filepath.Join(dir, "skills"), snapshots: filepath.Join(dir, "store"), sup: sup}
	if err := oci.MakeSessionSkillsDir(env.skillsDir); err != nil {
		t.Fatal(err)
	}
	skill := filepath.Join(env.snapshots, "v-tool")
	if err := os.MkdirAll(skill, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	os.Chmod(env.snapshots, 0o755)
	if err := os.WriteFile(filepath.Join(skill, "hello.py"), []byte("import sys\nprint('hello', *sys.argv[1:])\nopen('out.txt','w').write('made')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(skill, filepath.Join(dir, "tool-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(skill, filepath.Join(env.skillsDir, "tool")); err != nil {
		t.Fatal(err)
	}
	return env
}

func (env *sessionEnv) boot(t testing.TB, exits chan runtime.BackgroundRun) runtime.SessionSandbox {
	t.Helper()
	spec := runtime.SandboxSpec{
		ID: newID(), RootFS: testRootfs(t), Limits: runtime.Limits{Timeout: 30 * time.Second}, Boot: runtime.BootSession,
		Session:          &runtime.SessionMounts{SkillsDir: env.skillsDir, Supervisor: env.sup},
		OnBackgroundExit: func(r runtime.BackgroundRun) { exits <- r },
	}
	sb, err := env.rt.(runtime.SessionBackend).CreateSession(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

func sessionRun(t *testing.T, sb runtime.SessionSandbox, id string, args ...string) *runtime.Result {
	t.Helper()
	res, err := sb.Run(context.Background(), id, runtime.Invocation{Args: args, Limits: runtime.Limits{Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return res
}

// TestSessionSandbox: one sandbox takes many runs; a background server
// started by one run serves the next ones; what a foreground run leaves
// running is gone when it ends; another session's sandbox reaches
// nothing of it; destroying the sandbox leaves no container or process.
func TestSessionSandbox(t *testing.T) {
	env := newSessionEnv(t)
	exits := make(chan runtime.BackgroundRun, 4)
	sb := env.boot(t, exits)

	res := sessionRun(t, sb, "r1", "python3", "/skills/tool/hello.py", "a")
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "hello a" {
		t.Fatalf("run 1: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if len(res.Outputs) != 1 || res.Outputs[0].Path != "out.txt" {
		t.Fatalf("run 1 outputs: %+v", res.Outputs)
	}
	// The file stays; a run that does not touch it has no outputs.
	res = sessionRun(t, sb, "r2", "python3", "-c", "print(open('out.txt').read())")
	if strings.TrimSpace(string(res.Stdout)) != "made" || len(res.Outputs) != 0 {
		t.Fatalf("run 2: stdout %q outputs %+v stderr %q", res.Stdout, res.Outputs, res.Stderr)
	}

	bg, err := sb.Background(context.Background(), "srv", runtime.Invocation{
		Args:   []string{"python3", "-u", "-m", "http.server", "--bind", "127.0.0.1", "8000"},
		Limits: runtime.Limits{Timeout: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	fetch := "import urllib.request,time\nfor i in range(100):\n  try:\n    print(urllib.request.urlopen('http://127.0.0.1:8000/').status); break\n  except OSError: time.sleep(0.1)\n"
	res = sessionRun(t, sb, "r3", "python3", "-c", fetch)
	if strings.TrimSpace(string(res.Stdout)) != "200" {
		t.Fatalf("fetch from the background server: %q %q", res.Stdout, res.Stderr)
	}
	log, _ := os.ReadFile(bg.LogHost)
	if !strings.Contains(string(log), "GET / HTTP") {
		t.Fatalf("background log %s: %q", bg.LogHost, log)
	}

	// A run cannot reach the supervisor's pipes to the host, nor trace it.
	res = sessionRun(t, sb, "r3b", "python3", "-c", "import os\nfor p in ('/proc/1/fd/1', '/proc/1/fd/0'):\n  try:\n    open(p, 'wb').write(b'x'); print('opened', p)\n  except OSError as e: print('refused', p)\n")
	if strings.Contains(string(res.Stdout), "opened") || !strings.Contains(string(res.Stdout), "refused /proc/1/fd/1") {
		t.Fatalf("a run reached the supervisor's stdio: %q %q", res.Stdout, res.Stderr)
	}

	// A foreground run's leftovers die with it; the server does not.
	sessionRun(t, sb, "r4", "sh", "-c", "sleep 1000 & (setsid sleep 1001 &) ; echo started")
	res = sessionRun(t, sb, "r5", "sh", "-c", "ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
	if strings.Contains(string(res.Stdout), "sleep 100") || !strings.Contains(string(res.Stdout), "http.server") {
		t.Fatalf("processes after a run that left two sleeps: %s", res.Stdout)
	}

	// Another session's sandbox: its own loopback, files and processes.
	other := env.boot(t, make(chan runtime.BackgroundRun, 1))
	res = sessionRun(t, other, "o1", "python3", "-c", "import urllib.request,os\ntry:\n  urllib.request.urlopen('http://127.0.0.1:8000/', timeout=2); print('reached')\nexcept OSError as e: print('refused')\nprint(os.path.exists('out.txt'))\nprint(any(('http.'+'server') in open('/proc/%s/cmdline'%p,'rb').read().decode(errors='replace') for p in os.listdir('/proc') if p.isdigit()))")
	if got := strings.Fields(string(res.Stdout)); len(got) != 3 || got[0] != "refused" || got[1] != "False" || got[2] != "False" {
		t.Fatalf("other session saw: %q %q", res.Stdout, res.Stderr)
	}

	if err := sb.Signal(context.Background(), "srv", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case ex := <-exits:
		if ex.ID != "srv" || ex.Running {
			t.Fatalf("exit report %+v", ex)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit report for the signalled background run")
	}

	id := sb.ID()
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("pgrep", "-f", id).Output()
	if len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("host processes of %s left: %s", id, out)
	}
}

// counterServer is a background python server holding a counter in
// memory: GET / counts, GET /rand draws from os.urandom, random and
// /dev/urandom.
const counterServer = `
import http.server, os, random
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
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
`

func fetchArgs(path string) []string {
	return []string{"python3", "-c", "import urllib.request,time\nfor i in range(100):\n  try:\n    print(urllib.request.urlopen('http://127.0.0.1:8000" + path + "').read().decode()); break\n  except OSError: time.sleep(0.1)\n"}
}

// TestSessionCheckpointFork: a sandbox holding a counter in a background
// process and a file in /work is checkpointed (and gone), then restored
// twice at once from the one checkpoint: each fork counts on from where
// the checkpoint was, has the file, and draws other random numbers.
func TestSessionCheckpointFork(t *testing.T) {
	env := newSessionEnv(t)
	sb := env.boot(t, make(chan runtime.BackgroundRun, 4))
	if _, err := sb.Background(context.Background(), "counter", runtime.Invocation{Args: []string{"python3", "-c", counterServer}, Limits: runtime.Limits{Timeout: 30 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if got := strings.TrimSpace(string(sessionRun(t, sb, fmt.Sprintf("c%d", i), fetchArgs("/")...).Stdout)); got != fmt.Sprint(i) {
			t.Fatalf("count %d: %q", i, got)
		}
	}
	sessionRun(t, sb, "f", "sh", "-c", "echo kept > /work/state.txt")
	spec := sb.(interface{ Spec() runtime.SandboxSpec }).Spec()

	ck := t.TempDir()
	img, work := filepath.Join(ck, "image"), filepath.Join(ck, "work")
	os.Mkdir(img, 0o700)
	began := time.Now()
	if err := sb.(runtime.Checkpointer).Checkpoint(context.Background(), img, work, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint: %s", time.Since(began))
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox did not go with its checkpoint")
	}

	rs := env.rt.(runtime.SessionRestorer)
	var rands []string
	for i := 0; i < 2; i++ {
		fs := spec
		fs.ID = newID()
		began := time.Now()
		fork, err := rs.RestoreSession(context.Background(), fs, img, work, []runtime.BackgroundRun{{ID: "counter", Running: true}})
		if err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		t.Logf("restore %d: %s", i, time.Since(began))
		t.Cleanup(func() { fork.Destroy(context.Background()) })
		if got := strings.TrimSpace(string(sessionRun(t, fork, "n", fetchArgs("/")...).Stdout)); got != "4" {
			t.Fatalf("fork %d counts on to %q, want 4", i, got)
		}
		if got := strings.TrimSpace(string(sessionRun(t, fork, "s", "cat", "/work/state.txt").Stdout)); got != "kept" {
			t.Fatalf("fork %d's /work: %q", i, got)
		}
		old := strings.TrimSpace(string(sessionRun(t, fork, "r1", fetchArgs("/rand")...).Stdout))
		fresh := strings.TrimSpace(string(sessionRun(t, fork, "r2", "python3", "-c", "import os,random\nprint(os.urandom(8).hex(), repr(random.random()), open('/dev/urandom','rb').read(8).hex())").Stdout))
		runs, _ := fork.Runs(context.Background())
		if len(runs) != 1 || !runs[0].Running {
			t.Fatalf("fork %d's background runs: %+v", i, runs)
		}
		rands = append(rands, old, fresh)
	}
	// Kernel entropy is fresh in every fork, also in a process that lived
	// through the checkpoint; a new run's Python random is too.
	a, b := strings.Fields(rands[0]), strings.Fields(rands[2])
	if len(a) != 3 || len(b) != 3 || a[0] == b[0] || a[2] == b[2] {
		t.Fatalf("the counter process of two forks drew the same kernel randomness: %q %q", rands[0], rands[2])
	}
	if rands[1] == rands[3] || strings.Fields(rands[1])[1] == strings.Fields(rands[3])[1] {
		t.Fatalf("new runs in two forks drew the same numbers: %q %q", rands[1], rands[3])
	}
}

// BenchmarkSessionRun times what delivering a job into a session sandbox
// costs, with no socket, policy or audit around it: a python script run
// on the supervisor's pre-started interpreter, from Run to its result,
// against a native python3 start of the same script on the host, in the
// same run (ratio_native: the goal is <= 1). Between runs it waits until
// the supervisor has an interpreter ready again (untimed), as a session
// does while its model thinks.
//
//	SKILLBOX_BIN=bin/skillbox go test -tags integration -run XXX -bench SessionRun ./runtime/
func BenchmarkSessionRun(b *testing.B) {
	env := newSessionEnv(b)
	sb := env.boot(b, make(chan runtime.BackgroundRun, 1))
	script := filepath.Join(env.skillsDir, "tool", "hello.py")
	py := "/usr/bin/python3"
	cwd := b.TempDir() // the script writes out.txt where it runs
	var native, session []time.Duration
	for i := 0; i < b.N+1; i++ {
		t0 := time.Now()
		cmd := exec.Command(py, script, "x")
		cmd.Dir = cwd
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("native: %v %s", err, out)
		}
		native = append(native, time.Since(t0))
		time.Sleep(500 * time.Millisecond)
		t0 = time.Now()
		res, err := sb.Run(context.Background(), fmt.Sprintf("b%d", i), runtime.Invocation{Args: []string{"python3", "/skills/tool/hello.py", "x"}, Limits: runtime.Limits{Timeout: 30 * time.Second}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("session run: %v %+v", err, res)
		}
		session = append(session, time.Since(t0))
	}
	med := func(ds []time.Duration) time.Duration {
		ds = append([]time.Duration(nil), ds[1:]...)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	b.ReportMetric(float64(med(session).Microseconds())/1000, "session_ms")
	b.ReportMetric(float64(med(native).Microseconds())/1000, "native_ms")
	b.ReportMetric(float64(med(session))/float64(med(native)), "ratio_native")
}

// TestSessionSandboxMemoryLimit: a run that goes over the sandbox's memory
// limit ends as oom, and the session's sandbox is gone (a new one takes
// the next run); nothing of it is left on the host.
func TestSessionSandboxMemoryLimit(t *testing.T) {
	env := newSessionEnv(t)
	spec := runtime.SandboxSpec{
		ID: newID(), RootFS: testRootfs(t), Limits: runtime.Limits{Timeout: 60 * time.Second, MemoryBytes: 256 << 20}, Boot: runtime.BootSession,
		Session: &runtime.SessionMounts{SkillsDir: env.skillsDir, Supervisor: env.sup},
	}
	sb, err := env.rt.(runtime.SessionBackend).CreateSession(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	res, err := sb.Run(context.Background(), "hog", runtime.Invocation{Args: []string{"python3", "-c", "x = []\nwhile True: x.append(bytearray(16 << 20))"}, Limits: spec.Limits})
	if err != nil {
		t.Fatalf("a run over the memory limit: %v", err)
	}
	if res.Reason != runtime.ReasonOOM {
		t.Fatalf("a run over the memory limit: reason %s, exit %d, stderr %q", res.Reason, res.ExitCode, res.Stderr)
	}
	select {
	case <-sb.Done():
		t.Logf("the sandbox went down with the run")
	case <-time.After(3 * time.Second):
		// gVisor may have killed only the run: the sandbox serves on.
		if r, err := sb.Run(context.Background(), "after", runtime.Invocation{Args: []string{"true"}, Limits: spec.Limits}); err != nil || r.ExitCode != 0 {
			t.Fatalf("the sandbox after an oom run: %v %+v", err, r)
		}
		t.Logf("the sandbox served on after the oom run")
	}
}
