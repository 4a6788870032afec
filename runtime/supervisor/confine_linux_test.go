package supervisor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/supervisor"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// envConfine, "UID:GID:NETNS:WORKDIR", makes the test supervisor a
// confining one working in WORKDIR.
const envConfine = "SKILLBOX_TEST_SUPERVISOR_CONFINE"

// testConfinement is the test supervisor's confinement (envConfine).
func testConfinement() *supervisor.JobConfinement {
	v := os.Getenv(envConfine)
	if v == "" {
		return nil
	}
	f := strings.SplitN(v, ":", 4)
	uid, _ := strconv.Atoi(f[0])
	gid, _ := strconv.Atoi(f[1])
	if err := os.Chdir(f[3]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return &supervisor.JobConfinement{UID: uid, GID: gid, NetNS: f[2] == "1", WorkDir: f[3]}
}

// hostileChecks parses hostile.py's "check: outcome" lines.
func hostileChecks(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			m[k] = v
		}
	}
	return m
}

// wantConfined checks hostile.py's outcomes as the job uid 65534 in its
// own network namespace (netns, the supervisor's, must differ); with eth
// the sandbox has an eth0 address; with loopback the job's own loopback
// must work (a fresh namespace of a Linux kernel has lo down, gVisor's
// has it up).
func wantConfined(t *testing.T, got map[string]string, supNetNS string, eth, loopback bool) {
	t.Helper()
	want := map[string][]string{
		"uid":                   {"65534 65534"},
		"gid":                   {"65534 65534"},
		"groups":                {""},
		"capeff":                {"0000000000000000"},
		"dial 127.0.0.1":        {"ECONNREFUSED", "ENETUNREACH"},
		"dial 0.0.0.0 listener": {"ECONNREFUSED", "ENETUNREACH"},
		"dial ::1":              {"ECONNREFUSED", "ENETUNREACH", "EADDRNOTAVAIL"},
		"dial abstract":         {"ECONNREFUSED"},
		"read secret":           {"EACCES"},
		"read environ":          {"EACCES", "EPERM"},
		"read mem":              {"EACCES", "EPERM"},
		"list fd":               {"EACCES", "EPERM"},
		"open fd 0":             {"EACCES", "EPERM"},
		"kill 0":                {"EPERM"},
		"kill TERM":             {"EPERM"},
		"setuid 0":              {"EPERM", "EINVAL"},
		"ptrace":                {"EPERM"},
	}
	if got["setns"] != "no os.setns" {
		want["setns"] = []string{"EPERM", "EACCES"}
	}
	if eth {
		want["dial eth0"] = []string{"ENETUNREACH"}
		want["dial eth0 0.0.0.0 listener"] = []string{"ENETUNREACH"}
	}
	if loopback {
		want["own loopback"] = []string{"ok"}
	}
	for k, vs := range want {
		v, ok := got[k]
		found := false
		for _, w := range vs {
			found = found || (ok && v == w)
		}
		if !found {
			t.Errorf("%s: %q, want one of %q", k, v, vs)
		}
	}
	if got["netns"] == "" || got["netns"] == supNetNS {
		t.Errorf("the job's network namespace %q is not its own (the supervisor's: %q)", got["netns"], supNetNS)
	}
}

// confinedWorkDir is a work dir a confining test supervisor gives to the
// job: root's, under a directory every uid may traverse.
func confinedWorkDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skillbox-confine-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	return work
}

func ownerOf(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

// TestConfinedNative runs a confining supervisor natively (root): a shell
// run, a python run on a worker and one without, a background run with
// its log, and the sweep of a confined run's leftover; the hostile job
// reaches nothing of the supervisor's.
func TestConfinedNative(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a confining supervisor writes its jobs' uid maps")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	work := confinedWorkDir(t)
	hostile, err := os.ReadFile("testdata/confine/hostile.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "hostile.py"), hostile, 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(filepath.Dir(work), "secret")
	if err := os.WriteFile(secret, []byte("the supervisor's"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envConfine, "65534:65534:1:"+work)
	s := start(t, 1)
	if s.hello.Workers != 1 || s.hello.PythonError != "" {
		t.Fatalf("hello %+v: the confined worker did not start", s.hello)
	}
	if o := ownerOf(t, work); o != "65534:65534" {
		t.Errorf("work dir owner %s, want the job's", o)
	}
	supNetNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", s.pid))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"hostile.py", strconv.Itoa(s.pid), "", secret}
	for _, tc := range []struct {
		name   string
		req    supervisor.Request
		worker bool
	}{
		{"shell", supervisor.Request{Argv: append([]string{"sh", "-c", `exec python3 "$@"`, "sh"}, args...)}, false},
		{"python worker", supervisor.Request{Argv: append([]string{"python3"}, args...), Python: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idle := s.waitWorkers(t, 1)
			tc.req.ID, tc.req.Env = id(), testEnv
			r, err := s.c.Start(ctxT(t), tc.req, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			pid := r.PID()
			if tc.worker && !idle[pid] {
				t.Errorf("run pid %d is not one of the idle workers %v", pid, idle)
			}
			wait(t, r)
		})
		t.Run(tc.name+" checks", func(t *testing.T) {
			tc.req.ID, tc.req.Env = id(), testEnv
			out, errOut, e := s.run(t, tc.req)
			if e.Code != 0 {
				t.Fatalf("exit %+v stderr %s", e, errOut)
			}
			t.Logf("%s", out)
			wantConfined(t, hostileChecks(out), supNetNS, false, false)
			if b, _ := os.ReadFile(secret); string(b) != "the supervisor's" {
				t.Errorf("secret %q", b)
			}
		})
	}
	if !alive(s.pid) {
		t.Fatal("the supervisor is gone")
	}

	t.Run("files", func(t *testing.T) {
		out, errOut, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"sh", "-c", "echo x > made && stat -c %u:%g made"}, Env: testEnv})
		if e.Code != 0 || strings.TrimSpace(out) != "65534:65534" {
			t.Errorf("exit %+v stdout %q stderr %q", e, out, errOut)
		}
	})
	t.Run("background log", func(t *testing.T) {
		log := filepath.Join(s.runsDir, "bg", "out.log")
		// The test's temp dirs, open to the job so that it may read
		// its log.
		for _, d := range []string{filepath.Dir(s.runsDir), filepath.Dir(filepath.Dir(s.runsDir))} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		bg, err := s.c.Start(ctxT(t), supervisor.Request{ID: "bgc", Argv: []string{"sh", "-c", "id -u; test -r " + log + " && echo readable"}, Env: testEnv, Background: true, Log: log}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !waitfor.Within(10*time.Second, func() bool { return !alive(bg.PID()) }) {
			t.Fatal("the background run did not end")
		}
		b, _ := os.ReadFile(log)
		// The job reads its own log, as an unconfined one does.
		if string(b) != "65534\nreadable\n" {
			t.Errorf("log %q", b)
		}
		for _, p := range []string{filepath.Dir(log), log} {
			if o := ownerOf(t, p); o != "65534:65534" {
				t.Errorf("%s owner %s, want the job's", p, o)
			}
		}
	})
	t.Run("sweep", func(t *testing.T) {
		pidFile := filepath.Join(work, "leftover.pid")
		script := "setsid sh -c 'echo $$ > " + pidFile + ".tmp; mv " + pidFile + ".tmp " + pidFile + "; exec sleep 1000' & while [ ! -e " + pidFile + " ]; do sleep 0.01; done; cat " + pidFile
		out, _, e := s.run(t, supervisor.Request{ID: id(), Argv: []string{"sh", "-c", script}, Env: testEnv})
		pid, err := strconv.Atoi(strings.TrimSpace(out))
		if e.Code != 0 || err != nil {
			t.Fatalf("exit %+v output %q", e, out)
		}
		waitGone(t, pid, "the confined run's leftover")
	})
}
