package supervisor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/supervisor"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// The tests run the real supervisor natively: this test binary started
// again with envServe set is the supervisor, on its stdin and stdout.
const (
	envServe   = "SKILLBOX_TEST_SUPERVISOR"
	envWorkers = "SKILLBOX_TEST_SUPERVISOR_WORKERS"
	envRunsDir = "SKILLBOX_TEST_SUPERVISOR_RUNS"
	envPython  = "SKILLBOX_TEST_SUPERVISOR_PYTHON"
)

func TestMain(m *testing.M) {
	if os.Getenv(envServe) == "listen" {
		if err := serveListen(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(envServe) == "1" {
		n, _ := strconv.Atoi(os.Getenv(envWorkers))
		err := supervisor.Serve(context.Background(), os.Stdin, os.Stdout, supervisor.Options{
			PythonWorkers: n,
			RunsDir:       os.Getenv(envRunsDir),
			Python:        os.Getenv(envPython),
			DrainTimeout:  300 * time.Millisecond,
			Confine:       testConfinement(),
			Logf:          func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testEnv is a run's whole environment.
var testEnv = []string{"PATH=" + runtime.DefaultPath, "HOME=/tmp", "LANG=C.UTF-8"}

type sup struct {
	c       *supervisor.Client
	pid     int
	runsDir string
	hello   supervisor.Hello
	mu      sync.Mutex
	exits   map[string]supervisor.Exit
}

// start starts a supervisor with n python workers.
func start(t *testing.T, workers int) *sup { return startPython(t, workers, "") }

// startPython starts a supervisor whose workers' interpreter is python.
func startPython(t *testing.T, workers int, python string) *sup {
	t.Helper()
	s := &sup{runsDir: filepath.Join(t.TempDir(), "runs"), exits: map[string]supervisor.Exit{}}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envServe+"=1", envWorkers+"="+strconv.Itoa(workers), envRunsDir+"="+s.runsDir, envPython+"="+python)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.pid = cmd.Process.Pid
	s.c = supervisor.NewClient(in, out, supervisor.WithOnExit(func(id string, e supervisor.Exit) {
		s.mu.Lock()
		s.exits[id] = e
		s.mu.Unlock()
	}))
	t.Cleanup(func() {
		s.c.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("the supervisor did not end when its stdin closed")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.hello, err = s.c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if s.hello.Version != supervisor.Version {
		t.Fatalf("ready event of version %d, want %d", s.hello.Version, supervisor.Version)
	}
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run runs req in the foreground and returns its output and exit.
func (s *sup) run(t *testing.T, req supervisor.Request) (string, string, supervisor.Exit) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	r, err := s.c.Start(ctxT(t), req, &stdout, &stderr)
	if err != nil {
		t.Fatalf("start %q: %v", req.Argv, err)
	}
	wait(t, r)
	return stdout.String(), stderr.String(), r.Exit()
}

func wait(t *testing.T, r *supervisor.Run) {
	t.Helper()
	select {
	case <-r.Done():
		if r.Err() != nil {
			t.Fatalf("run %s: %v", r.ID(), r.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run %s did not end", r.ID())
	}
}

var idSeq int

func id() string { idSeq++; return "r" + strconv.Itoa(idSeq) }

func TestForeground(t *testing.T) {
	s := start(t, 0)
	dir := t.TempDir()
	for _, tc := range []struct {
		name           string
		argv           []string
		stdin, cwd     string
		stdout, stderr string
		exit           supervisor.Exit
	}{
		{name: "stdin echoed", argv: []string{"cat"}, stdin: "hello\nworld\n", stdout: "hello\nworld\n"},
		{name: "exit code", argv: []string{"sh", "-c", "exit 3"}, exit: supervisor.Exit{Code: 3}},
		{name: "stderr", argv: []string{"sh", "-c", "echo out; echo err >&2"}, stdout: "out\n", stderr: "err\n"},
		{name: "killed", argv: []string{"sh", "-c", "kill -9 $$"}, exit: supervisor.Exit{Code: 137, Signal: "SIGKILL"}},
		{name: "terminated", argv: []string{"sh", "-c", "kill -TERM $$"}, exit: supervisor.Exit{Code: 143, Signal: "SIGTERM"}},
		{name: "env exactly", argv: []string{"env"}, stdout: strings.Join(testEnv, "\n") + "\n"},
		{name: "cwd", argv: []string{"pwd"}, cwd: dir, stdout: dir + "\n"},
		{name: "absolute path", argv: []string{"/bin/echo", "a b"}, stdout: "a b\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, e := s.run(t, supervisor.Request{ID: id(), Argv: tc.argv, Env: testEnv, Cwd: tc.cwd, Stdin: []byte(tc.stdin)})
			if out != tc.stdout || errOut != tc.stderr || e != tc.exit {
				t.Errorf("got stdout %q stderr %q exit %+v, want %q %q %+v", out, errOut, e, tc.stdout, tc.stderr, tc.exit)
			}
		})
	}
}

func TestBigOutputAndStdin(t *testing.T) {
	s := start(t, 0)
	want, err := exec.Command("seq", "1", "400000").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 2<<20 {
		t.Fatalf("seq gave %d bytes", len(want))
	}
	out, _, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"seq", "1", "400000"}, Env: testEnv})
	if out != string(want) || e.Code != 0 {
		t.Errorf("seq: %d bytes (exit %+v), want %d bytes, in order", len(out), e, len(want))
	}
	// Stdin of more than one request's part comes back whole.
	out, _, e = s.run(t, supervisor.Request{ID: id(), Argv: []string{"cat"}, Env: testEnv, Stdin: want})
	if out != string(want) || e.Code != 0 {
		t.Errorf("cat: %d bytes (exit %+v), want %d bytes", len(out), e, len(want))
	}
}

func TestStartFailed(t *testing.T) {
	s := start(t, 0)
	for _, tc := range []struct {
		name string
		req  supervisor.Request
		want string
	}{
		{"not in PATH", supervisor.Request{Argv: []string{"no-such-program"}, Env: testEnv}, "no-such-program: no such file in PATH"},
		{"no such file", supervisor.Request{Argv: []string{"/no/such/file"}, Env: testEnv}, "/no/such/file: no such file"},
		{"no cwd", supervisor.Request{Argv: []string{"true"}, Env: testEnv, Cwd: "/no/such/dir"}, "working directory /no/such/dir"},
		{"log outside", supervisor.Request{Argv: []string{"true"}, Env: testEnv, Background: true, Log: "/tmp/x.log"}, "background log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.ID = id()
			_, err := s.c.Start(ctxT(t), tc.req, nil, nil)
			if !errors.Is(err, supervisor.ErrStart) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrStart saying %q", err, tc.want)
			}
		})
	}
	// The id is free again, and the supervisor still serves.
	if err := s.c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestSignalsToSupervisor: a run cannot end the supervisor with a signal.
func TestSignalsToSupervisor(t *testing.T) {
	s := start(t, 0)
	_, errOut, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"sh", "-c", "for s in TERM INT HUP QUIT ABRT TRAP PIPE USR1 USR2 ALRM; do kill -$s $PPID || exit 1; done"}, Env: testEnv})
	if e.Code != 0 {
		t.Fatalf("exit %+v: %s", e, errOut)
	}
	time.Sleep(100 * time.Millisecond) // time for a signal to do harm, had it any
	if err := s.c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// leaveSession is a shell script that starts `sleep 1000` in a session of
// its own (holding the script's stdout) and prints its pid once it is in
// it.
func leaveSession(t *testing.T) string {
	f := filepath.Join(t.TempDir(), "pid")
	return "setsid sh -c 'echo $$ >" + f + ".tmp; mv " + f + ".tmp " + f + "; exec sleep 1000' & while [ ! -e " + f + " ]; do sleep 0.01; done; cat " + f
}

// alive says whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	if waitfor.Within(5*time.Second, func() bool { return !alive(pid) }) {
		return
	}
	t.Errorf("%s (pid %d) is still alive", what, pid)
	syscall.Kill(pid, syscall.SIGKILL)
}

func TestBackgroundAndSweep(t *testing.T) {
	s := start(t, 0)
	log := filepath.Join(s.runsDir, "bg1", "out.log")
	bg, err := s.c.Start(ctxT(t), supervisor.Request{ID: "bg1", Argv: []string{"sh", "-c", "echo started; echo oops >&2; sleep 1000 & wait"}, Env: testEnv, Background: true, Log: log}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	// A foreground run leaving a child in its group, and one leaving a
	// child in a session of its own that holds the run's stdout.
	for _, tc := range []struct{ name, script string }{
		{"same group", "sleep 1000 & echo $!"},
		{"own session", leaveSession(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out, _, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"sh", "-c", tc.script}, Env: testEnv})
			if e.Code != 0 {
				t.Fatalf("exit %+v", e)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("the run took %v: its leftover held its output open", d)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(out))
			if err != nil {
				t.Fatalf("output %q", out)
			}
			waitGone(t, pid, "the run's leftover sleep")
		})
	}

	if !alive(bg.PID()) {
		t.Fatalf("the background run did not survive the foreground runs")
	}
	runs, err := s.c.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var live, ended int
	for _, r := range runs {
		if r.ID == "bg1" && r.Running && r.Background && r.PID == bg.PID() {
			live++
		}
		if !r.Running && r.Exit != nil && r.Exit.Code == 0 {
			ended++
		}
	}
	if live != 1 || ended != 2 {
		t.Errorf("list: %+v: want bg1 running and two ended runs", runs)
	}
	b, err := os.ReadFile(log)
	if err != nil || string(b) != "started\noops\n" {
		t.Errorf("log: %q, %v", b, err)
	}
	if fi, err := os.Stat(log); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode: %v %v", fi.Mode(), err)
	}

	if err := s.c.Signal(ctxT(t), "bg1", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait(t, bg)
	if e := bg.Exit(); e.Code != 143 || e.Signal != "SIGTERM" {
		t.Errorf("exit after SIGTERM: %+v", e)
	}
	err = s.c.Signal(ctxT(t), "bg1", syscall.SIGTERM)
	if !errors.Is(err, supervisor.ErrRefused) || !strings.Contains(err.Error(), `"bg1"`) {
		t.Errorf("signal to an ended run: %v", err)
	}
}

// TestConcurrentForeground: a foreground run's leftover holding its
// stdout while another foreground run is active does not hold its exit for
// longer than the drain timeout, and is gone once the other run ended.
func TestConcurrentForeground(t *testing.T) {
	s := start(t, 0)
	long, err := s.c.Start(ctxT(t), supervisor.Request{ID: id(), Argv: []string{"sleep", "2"}, Env: testEnv}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	out, _, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"sh", "-c", leaveSession(t)}, Env: testEnv})
	if d := time.Since(begin); e.Code != 0 || d > 1500*time.Millisecond {
		t.Fatalf("exit %+v after %v", e, d)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("output %q", out)
	}
	if !alive(pid) {
		t.Errorf("the leftover was killed while another foreground run was active")
	}
	wait(t, long)
	waitGone(t, pid, "the leftover after the other run ended")
}

// TestBackgroundLeavesSession: a background process that leaves its run's
// session is a leftover at the next sweep; one that stays in it is the
// run's.
func TestBackgroundLeavesSession(t *testing.T) {
	s := start(t, 0)
	log := filepath.Join(s.runsDir, "bg.log")
	_, err := s.c.Start(ctxT(t), supervisor.Request{ID: "bg", Argv: []string{"sh", "-c", "sleep 1000 & echo $!; " + leaveSession(t) + "; wait"}, Env: testEnv, Background: true, Log: log}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	waitfor.Within(5*time.Second, func() bool {
		b, _ := os.ReadFile(log)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return len(pids) >= 2
	})
	if len(pids) != 2 {
		t.Fatalf("log has %v", pids)
	}
	s.run(t, supervisor.Request{ID: id(), Argv: []string{"true"}, Env: testEnv})
	waitGone(t, pids[1], "the process that left the background run's session")
	if !alive(pids[0]) {
		t.Errorf("the background run's own child was killed")
	}
}

// workerPIDs are the supervisor's idle python workers.
func workerPIDs(t *testing.T, supPID int) map[int]bool {
	out := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if len(f) > 1 && f[1] == strconv.Itoa(supPID) && bytes.Contains(cmd, []byte("skillbox's Python supervisor")) {
			out[pid] = true
		}
	}
	return out
}

// waitWorkers waits until n python workers are ready, and returns them.
func (s *sup) waitWorkers(t *testing.T, n int) map[int]bool {
	t.Helper()
	var w map[int]bool
	if waitfor.Within(20*time.Second, func() bool {
		h, err := s.c.Status(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		w = workerPIDs(t, s.pid)
		return h.Workers == n && len(w) == n
	}) {
		return w
	}
	t.Fatalf("want %d python workers, have %v", n, workerPIDs(t, s.pid))
	return nil
}

const pyScript = `import os, random, sys
print(sys.argv[1:])
print(os.getcwd())
print(os.environ.get("FOO"), len(os.environ))
print(sys.stdin.read())
print(open("/proc/self/cmdline", "rb").read().split(b"\0")[1].decode())
print(random.random())
print(os.getpid())
`

func TestPython(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "s.py")
	if err := os.WriteFile(script, []byte(pyScript), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{1, 0} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := start(t, workers)
			if s.hello.Workers != workers || s.hello.PythonError != "" {
				t.Fatalf("hello %+v", s.hello)
			}
			env := append(testEnv[:len(testEnv):len(testEnv)], "FOO=bar")
			var rnd []string
			for i := 0; i < 2; i++ {
				idle := s.waitWorkers(t, workers)
				out, errOut, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"python3", script, "a", "b c"}, Env: env, Cwd: dir, Stdin: []byte("in put"), Python: true})
				lines := strings.Split(out, "\n")
				if e.Code != 0 || len(lines) != 8 {
					t.Fatalf("exit %+v, stdout %q, stderr %q", e, out, errOut)
				}
				via := script // argv[1] of a started python3
				if workers > 0 {
					via = "-c" // the pre-started supervisor's
				}
				want := []string{"['a', 'b c']", dir, "bar 4", "in put", via}
				if !slicesEqual(lines[:5], want) {
					t.Errorf("got %q, want %q", lines[:5], want)
				}
				pid, _ := strconv.Atoi(lines[6])
				if workers > 0 && !idle[pid] {
					t.Errorf("the run's pid %d is not one of the idle workers %v", pid, idle)
				}
				rnd = append(rnd, lines[5])
			}
			if rnd[0] == rnd[1] {
				t.Errorf("two runs drew the same random number %s", rnd[0])
			}
			if workers == 0 {
				return
			}
			// Reseed replaces every idle worker.
			before := s.waitWorkers(t, workers)
			if err := s.c.Reseed(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			after := s.waitWorkers(t, workers)
			for p := range after {
				if before[p] {
					t.Errorf("worker %d survived the reseed", p)
				}
			}
			// Back to back, the next run waits for the worker that is
			// starting rather than starting python3 itself.
			for i := 0; i < 3; i++ {
				out, errOut, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"python3", script}, Env: env, Cwd: dir, Python: true})
				if lines := strings.Split(out, "\n"); e.Code != 0 || len(lines) != 8 || lines[4] != "-c" {
					t.Errorf("back to back run %d: exit %+v, stdout %q, stderr %q: want it on a worker", i, e, out, errOut)
				}
			}
			// An exit and a traceback as python3 has them.
			out, errOut, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"python3", "-c", "raise SystemExit(4)"}, Env: env, Python: true})
			if e.Code != 4 || out != "" || errOut != "" {
				t.Errorf("-c: exit %+v stdout %q stderr %q", e, out, errOut)
			}
		})
	}
}

func TestNoPython(t *testing.T) {
	for _, tc := range []struct{ python, want string }{
		{"no-such-python", "no-such-python: no such file in PATH"},
		{"/bin/false", "python worker /bin/false exited before it was ready: no output"},
	} {
		t.Run(tc.python, func(t *testing.T) {
			s := startPython(t, 2, tc.python)
			if h := s.hello; h.Workers != 0 || !strings.Contains(h.PythonError, tc.want) {
				t.Errorf("hello %+v, want no workers because %q", h, tc.want)
			}
			// A python run starts python3 itself.
			out, _, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"python3", "-c", "print(6*7)"}, Env: testEnv, Python: true})
			if out != "42\n" || e.Code != 0 {
				t.Errorf("got %q %+v", out, e)
			}
			// It gave up: no worker is being started again and again.
			time.Sleep(300 * time.Millisecond)
			if w := workerPIDs(t, s.pid); len(w) != 0 {
				t.Errorf("workers %v", w)
			}
		})
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPythonWorkerStatus: a worker reports its run's exit status before the
// process is torn down, and the run's end is what python3 SCRIPT would give:
// the status, all of the output, no process of the run left. A script that
// writes on the status pipe itself only ends its own run.
func TestPythonWorkerStatus(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	s := start(t, 1)
	for _, tc := range []struct {
		name, code   string
		exit         int
		stdout, errs string // stdout exactly, stderr contains
	}{
		{"clean", "print('x' * 200000, end='')", 0, strings.Repeat("x", 200000), ""},
		{"exit code", "import sys\nprint('bye')\nsys.exit(3)", 3, "bye\n", ""},
		{"exit message", "import sys\nsys.exit('went wrong')", 1, "", "went wrong"},
		{"exception", "raise ValueError('boom')", 1, "", "ValueError: boom"},
		{"unclosed file", "f = open('out.txt', 'w')\nf.write('kept')\nprint(open('out.txt').read() == '')", 0, "True\n", ""},
		{"child holding stdout", "import subprocess\nsubprocess.Popen(['sleep', '60'])\nprint('left a child')", 0, "left a child\n", ""},
		{"forged status", "import os\nos.write(3, bytes([7]))\nimport time\ntime.sleep(60)", 7, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			script := filepath.Join(dir, "s.py")
			if err := os.WriteFile(script, []byte(tc.code), 0o644); err != nil {
				t.Fatal(err)
			}
			idle := s.waitWorkers(t, 1)
			started := time.Now()
			out, errOut, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"python3", script}, Env: testEnv, Cwd: dir, Python: true})
			if e.Code != tc.exit || out != tc.stdout || !strings.Contains(errOut, tc.errs) {
				t.Errorf("exit %+v, stdout %.80q (%d bytes), stderr %q; want exit %d, stdout %.80q, stderr with %q", e, out, len(out), errOut, tc.exit, tc.stdout, tc.errs)
			}
			if d := time.Since(started); d > 20*time.Second {
				t.Errorf("the run took %s: its end waited for a process it left", d)
			}
			for pid := range idle {
				if !waitfor.Within(10*time.Second, func() bool { return !alive(pid) }) {
					t.Errorf("the run's worker %d is alive after its end", pid)
				}
			}
			if tc.name == "unclosed file" {
				if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "kept" {
					t.Errorf("an unclosed file holds %q after the run, want it flushed", b)
				}
			}
		})
	}
}
