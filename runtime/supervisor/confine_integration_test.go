//go:build integration

package supervisor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/runtime/supervisor"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// The confining supervisor under the real pinned runsc (systrap), as the
// pod agent runs it: `skillbox supervise --job-uid 65534 --job-netns` as
// uid 0 of a sandbox holding only oci.ConfiningCapabilities, with an eth0
// (a veth in a network namespace of the test's). Run with
//
//	SKILLBOX_BIN=$PWD/bin/skillbox go test -tags integration -run TestConfined ./runtime/supervisor/

// agentStandIn is what the pod agent holds, run beside the supervisor in
// its network namespace as root (runsc exec): TCP listeners on 127.0.0.1,
// 0.0.0.0, ::1 and the eth0 address, an abstract unix socket, a 0600 file.
// It says "ready NETNS" once it reached every listener itself.
const agentStandIn = `
import os, socket, sys, threading
eth = sys.argv[1]
ls = []
for fam, addr in [(socket.AF_INET, ("127.0.0.1", 7001)), (socket.AF_INET, ("0.0.0.0", 7002)),
                  (socket.AF_INET6, ("::1", 7003)), (socket.AF_INET, (eth, 7004)), (socket.AF_UNIX, "\0skillbox-agent")]:
    s = socket.socket(fam, socket.SOCK_STREAM)
    if fam != socket.AF_UNIX:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the last stand-in's TIME_WAITs
    s.bind(addr)
    s.listen(16)
    ls.append(s)
def serve(s):
    while True:
        c, _ = s.accept()
        c.close()
for s in ls:
    threading.Thread(target=serve, args=(s,), daemon=True).start()
for fam, addr in [(socket.AF_INET, ("127.0.0.1", 7001)), (socket.AF_INET, ("127.0.0.1", 7002)), (socket.AF_INET, (eth, 7002)),
                  (socket.AF_INET6, ("::1", 7003)), (socket.AF_INET, (eth, 7004)), (socket.AF_UNIX, "\0skillbox-agent")]:
    c = socket.socket(fam, socket.SOCK_STREAM)
    c.connect(addr)
    c.close()
fd = os.open("/tmp/agent-secret", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.write(fd, b"the agent's")
os.close(fd)
print("ready", os.readlink("/proc/1/ns/net"), flush=True)
threading.Event().wait()
`

// agentDial reaches every listener of agentStandIn, from its namespace.
const agentDial = `
import socket, sys
eth = sys.argv[1]
for fam, addr in [(socket.AF_INET, ("127.0.0.1", 7001)), (socket.AF_INET, ("127.0.0.1", 7002)), (socket.AF_INET, (eth, 7002)),
                  (socket.AF_INET6, ("::1", 7003)), (socket.AF_INET, (eth, 7004)), (socket.AF_UNIX, "\0skillbox-agent")]:
    c = socket.socket(fam, socket.SOCK_STREAM)
    c.connect(addr)
    c.close()
`

// sandboxEth is the sandbox's eth0 address (its veth peer is .1).
const sandboxEth = "10.213.77.2"

type confinedSandbox struct {
	runsc, id, root, work string
	c                     *supervisor.Client
	stderr                *bytes.Buffer
	cmd                   *exec.Cmd
	done                  chan struct{}
}

func confinedPrereqs(t *testing.T) (runsc, rootfs, bin string) {
	t.Helper()
	if os.Geteuid() != 0 {
		runtimetest.SkipUnlessRequired(t, "needs root (runsc)")
	}
	runsc = runtime.PinnedRunscPath()
	if _, err := os.Stat(runsc); err != nil {
		runtimetest.SkipUnlessRequired(t, "no pinned runsc (%s): %v", runtime.RunscInstallCommand, err)
	}
	bin = os.Getenv("SKILLBOX_BIN")
	if bin == "" {
		runtimetest.SkipUnlessRequired(t, "SKILLBOX_BIN is not set (make build; SKILLBOX_BIN=$PWD/bin/skillbox)")
	}
	images := os.Getenv("SKILLBOX_IMAGES")
	if images == "" {
		images = "/var/lib/skillbox/images"
	}
	dirs, _ := filepath.Glob(filepath.Join(images, "rootfs", "sha256-*"))
	for _, d := range dirs {
		_, e1 := os.Stat(filepath.Join(d, "usr", "bin", "python3"))
		_, e2 := os.Stat(filepath.Join(d, "bin", "sh"))
		if e1 == nil && e2 == nil {
			return runsc, d, bin
		}
	}
	runtimetest.SkipUnlessRequired(t, "no image rootfs with python3 and /bin/sh under %s", images)
	return "", "", ""
}

// testNetNS makes a network namespace whose eth0 has sandboxEth.
func testNetNS(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("sbx-confine-%d", os.Getpid())
	host := fmt.Sprintf("sbxc%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	ip("link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", name)
	t.Cleanup(func() { exec.Command("ip", "link", "del", host).Run() })
	ip("addr", "add", "10.213.77.1/24", "dev", host)
	ip("link", "set", host, "up")
	ip("-n", name, "addr", "add", sandboxEth+"/24", "dev", "eth0")
	ip("-n", name, "link", "set", "eth0", "up")
	ip("-n", name, "link", "set", "lo", "up")
	return "/var/run/netns/" + name
}

// bootConfined boots a sandbox whose first process is the supervisor
// with args, as uid 0 with caps (nil: oci.ConfiningCapabilities).
func bootConfined(t *testing.T, name string, args []string, caps []string, netns string) *confinedSandbox {
	t.Helper()
	runsc, rootfs, bin := confinedPrereqs(t)
	dir := t.TempDir()
	s := &confinedSandbox{runsc: runsc, id: fmt.Sprintf("confine-%s-%d", name, os.Getpid()), root: filepath.Join(dir, "state"), work: filepath.Join(dir, "work"), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	skills := filepath.Join(dir, "skills")
	for _, d := range []string{s.root, s.work, skills} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := oci.MakeSessionSkillsDir(skills); err != nil {
		t.Fatal(err)
	}
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1\tlocalhost\n::1\tlocalhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostile, err := os.ReadFile("testdata/confine/hostile.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.work, "hostile.py"), hostile, 0o644); err != nil {
		t.Fatal(err)
	}
	job := runtime.Job{
		Sandbox: runtime.SandboxSpec{ID: s.id, RootFS: rootfs, Network: true,
			Session: &runtime.SessionMounts{SkillsDir: skills, Supervisor: bin}},
		Invocation: runtime.Invocation{Args: append([]string{runtime.SupervisorPath, "supervise"}, args...), Env: []string{"AGENT_SECRET=the agent's"}},
	}
	spec, err := oci.BuildSpec(job, oci.SpecOptions{WorkdirSource: s.work, HostsSource: hosts, NetNS: netns, ConfiningSupervisor: true})
	if err != nil {
		t.Fatal(err)
	}
	if caps != nil {
		spec.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps, Inheritable: []string{}, Ambient: []string{}}
	}
	// No cgroup: the limits are not what this tests.
	spec.Linux.Resources, spec.Linux.CgroupsPath = nil, ""
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(runsc, "--root", s.root, "--platform="+runtime.PinnedRunscPlatform, "run", "--bundle", dir, s.id)
	in, err := s.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.c.Close()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
		}
		exec.Command(runsc, "--root", s.root, "delete", "--force", s.id).Run()
		<-s.done
		// runsc leaves a null netns mounted in its state dir.
		unix.Unmount(filepath.Join(s.root, "null-netns"), unix.MNT_DETACH)
	})
	s.c = supervisor.NewClient(in, out)
	return s
}

func (s *confinedSandbox) run(t *testing.T, req supervisor.Request) (string, string, supervisor.Exit) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if req.Env == nil {
		req.Env = []string{"PATH=" + runtime.DefaultPath, "HOME=/tmp", "LANG=C.UTF-8"}
	}
	r, err := s.c.Start(ctxT(t), req, &stdout, &stderr)
	if err != nil {
		t.Fatalf("start %q: %v", req.Argv, err)
	}
	wait(t, r)
	return stdout.String(), stderr.String(), r.Exit()
}

// standIn starts agentStandIn in s and returns its (the supervisor's)
// network namespace once it listens.
func (s *confinedSandbox) standIn(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(s.runsc, "--root", s.root, "exec", s.id, "python3", "-c", agentStandIn, sandboxEth)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		ns, ok := strings.CutPrefix(strings.TrimSpace(l), "ready ")
		if !ok {
			t.Fatalf("agent stand-in: %q %s", l, stderr.String())
		}
		return ns
	case <-time.After(60 * time.Second):
		t.Fatalf("agent stand-in not ready: %s", stderr.String())
	}
	return ""
}

// TestConfinedSupervisorRunsc: every point of the job's confinement, on
// the shell path and the python worker path, under gVisor; normal runs
// still work; the supervisor is unharmed.
func TestConfinedSupervisorRunsc(t *testing.T) {
	netns := testNetNS(t)
	s := bootConfined(t, "on", []string{"--python-workers", "1", "--job-uid", "65534", "--job-netns"}, nil, netns)
	ctx, cancel := context.WithTimeout(context.Background(), runtime.BootTimeout)
	defer cancel()
	hello, err := s.c.Ready(ctx)
	if err != nil {
		t.Fatalf("ready: %v\n%s", err, s.stderr.String())
	}
	if hello.Workers != 1 || hello.PythonError != "" || hello.PID != 1 {
		t.Fatalf("hello %+v: the confined worker did not start\n%s", hello, s.stderr.String())
	}
	if o := ownerOf(t, s.work); o != "65534:65534" {
		t.Errorf("/work owner %s, want the job's", o)
	}
	args := []string{"/work/hostile.py", "1", sandboxEth, "/tmp/agent-secret", "hold"}
	for _, tc := range []struct {
		name string
		req  supervisor.Request
	}{
		{"shell", supervisor.Request{Argv: append([]string{"sh", "-c", `exec python3 "$@"`, "sh"}, args...)}},
		{"python worker", supervisor.Request{Argv: append([]string{"python3"}, args...), Python: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			supNetNS := s.standIn(t)
			tc.req.ID = id()
			tc.req.Env = []string{"PATH=" + runtime.DefaultPath, "HOME=/tmp", "LANG=C.UTF-8"}
			stdout := &watchWriter{want: "checked\n", seen: make(chan struct{})}
			var stderr bytes.Buffer
			r, err := s.c.Start(ctxT(t), tc.req, stdout, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-stdout.seen:
			case <-r.Done():
				t.Fatalf("the job ended before its checks: %+v\n%s\n%s", r.Exit(), stdout.String(), stderr.String())
			case <-time.After(60 * time.Second):
				t.Fatalf("the job's checks did not end:\n%s", stdout.String())
			}
			// The agent's listeners are there after the checks: refused
			// to the job, not gone (the sweep after the job kills them).
			if out, err := exec.Command(s.runsc, "--root", s.root, "exec", s.id, "python3", "-c", agentDial, sandboxEth).CombinedOutput(); err != nil {
				t.Errorf("the agent stand-in's listeners are not reachable from its own namespace after the job's checks: %v\n%s", err, out)
			}
			if err := s.c.Signal(ctxT(t), r.ID(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			wait(t, r)
			if e := r.Exit(); e.Code != 0 {
				t.Errorf("exit %+v stderr %s", e, stderr.String())
			}
			out := stdout.String()
			t.Logf("supervisor's netns %s; the job's checks:\n%s", supNetNS, out)
			wantConfined(t, hostileChecks(out), supNetNS, true, true)
		})
	}
	if err := s.c.Ping(ctxT(t)); err != nil {
		t.Fatalf("the supervisor does not answer after the hostile jobs: %v", err)
	}

	t.Run("normal runs", func(t *testing.T) {
		out, errOut, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"sh", "-c", "echo hi > /work/out.txt; cat /work/out.txt; id -u"}})
		if e.Code != 0 || out != "hi\n65534\n" {
			t.Errorf("shell: exit %+v stdout %q stderr %q", e, out, errOut)
		}
		out, errOut, e = s.run(t, supervisor.Request{ID: id(), Argv: []string{"python3", "-c", "import os; print(6*7, os.getuid(), open('/work/out.txt').read().strip())"}, Python: true})
		if e.Code != 0 || out != "42 65534 hi\n" {
			t.Errorf("python: exit %+v stdout %q stderr %q", e, out, errOut)
		}
		if o := ownerOf(t, filepath.Join(s.work, "out.txt")); o != "65534:65534" {
			t.Errorf("out.txt owner %s", o)
		}
	})
	t.Run("background log", func(t *testing.T) {
		log := runtime.SessionRunsDir + "/bg1.log"
		bg, err := s.c.Start(ctxT(t), supervisor.Request{ID: "bg1", Argv: []string{"sh", "-c", "id -u; test -r " + log + " && echo readable"},
			Env: []string{"PATH=" + runtime.DefaultPath}, Background: true, Log: log}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		host := filepath.Join(s.work, ".skillbox", "runs", "bg1.log")
		if !waitfor.Within(20*time.Second, func() bool { b, _ := os.ReadFile(host); return string(b) == "65534\nreadable\n" }) {
			b, _ := os.ReadFile(host)
			t.Fatalf("log %q (run %s)", b, bg.ID())
		}
		if o := ownerOf(t, host); o != "65534:65534" {
			t.Errorf("log owner %s", o)
		}
	})
	t.Run("start cost", func(t *testing.T) {
		const n = 10
		start := time.Now()
		for i := 0; i < n; i++ {
			if _, _, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"true"}}); e.Code != 0 {
				t.Fatalf("exit %+v", e)
			}
		}
		t.Logf("confined: %v per `true` run (start to exit, through the supervisor)", time.Since(start)/n)
	})
}

// TestConfinedSupervisorRefused: a supervisor without CAP_SETUID and
// CAP_SETGID refuses to serve, saying so, rather than run jobs less
// confined; the same sandbox unconfined serves (and gives the figure the
// confined start cost is compared with).
func TestConfinedSupervisorRefused(t *testing.T) {
	netns := testNetNS(t)
	s := bootConfined(t, "refused", []string{"--python-workers", "0", "--job-uid", "65534", "--job-netns", "--job-workdir", ""}, []string{}, netns)
	ctx, cancel := context.WithTimeout(context.Background(), runtime.BootTimeout)
	defer cancel()
	if _, err := s.c.Ready(ctx); err == nil {
		t.Fatal("a supervisor without CAP_SETUID and CAP_SETGID served")
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the refusing supervisor did not exit")
	}
	if msg := s.stderr.String(); !strings.Contains(msg, "lacks CAP_SETUID and CAP_SETGID") {
		t.Errorf("stderr %q does not say what is missing", msg)
	}

	u := bootConfined(t, "off", []string{"--python-workers", "0"}, []string{}, netns)
	if _, err := u.c.Ready(ctx); err != nil {
		t.Fatalf("ready: %v\n%s", err, u.stderr.String())
	}
	const n = 10
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, _, e := u.run(t, supervisor.Request{ID: id(), Argv: []string{"true"}}); e.Code != 0 {
			t.Fatalf("exit %+v", e)
		}
	}
	t.Logf("unconfined: %v per `true` run (start to exit, through the supervisor)", time.Since(start)/n)
}

// watchWriter keeps what is written and closes seen once want was.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.buf.String(), w.want)
	w.buf.Write(p)
	if !had && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
	}
	return len(p), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
