//go:build integration

package runtime_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/skillbox/skillbox/runtime/rootless"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// rootlessChildEnv marks the test process TestRunRootless starts as an
// ordinary user.
const rootlessChildEnv = "SKILLBOX_TEST_ROOTLESS_CHILD"

// rootlessTestUID is the ordinary user the case table runs as: nobody,
// which every system has and which owns nothing.
const rootlessTestUID = 65534

// enterRootlessChild, in the process TestRunRootless started as an
// ordinary user, does what skillbox run does first: it enters a user and
// mount namespace of its own (rootless.Enter re-executes this test binary
// there) and exits with that run's code.
func enterRootlessChild() {
	if os.Getenv(rootlessChildEnv) == "" {
		return
	}
	code, reexeced, err := rootless.Enter()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if reexeced {
		os.Exit(code)
	}
}

// TestRunRootless runs the case table on gVisor rootless, as an ordinary
// user (uid 65534) who has no privilege on the host: the test binary runs
// itself again as that user, which enters its own user namespace the way
// skillbox does, and runs the cases there with runtime.Options.Rootless.
// The cases are the same as TestRun's; what differs by design is said in
// their checks (runtimetest.CaseEnv.Rootless): the script is uid 0 of gVisor's kernel, and a
// refused fork is the script's EAGAIN, not reason pids.
func TestRunRootless(t *testing.T) {
	if os.Getenv(rootlessChildEnv) != "" {
		if !rootless.Active() {
			t.Fatal("the rootless test process is not in a user namespace of its own")
		}
		envVal := "ENVSECRET-" + randomHex(10)
		t.Setenv(hostEnvName, envVal)
		runCases(t, "runsc", os.Getenv("SKILLBOX_TEST_ROOTFS"), newHostSecret(t), envVal)
		return
	}
	rootfs := testRootfs(t)
	needBackend(t, "runsc")
	if os.Geteuid() != 0 {
		runtimetest.SkipUnlessRequired(t, "needs root to start the test as another user")
	}
	// A home of the user's: the test binary (go test's build dir is
	// root's alone), the state and run dirs, the temp dir.
	bin := runtimetest.ProbeBinary(t)
	home := filepath.Dir(bin)
	for _, d := range []string{"tmp", "state"} {
		if err := os.Mkdir(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := filepath.Walk(home, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, rootlessTestUID, rootlessTestUID)
	}); err != nil {
		t.Fatal(err)
	}
	// -test.v always: the child's verdict is read from its output.
	args := []string{"-test.run", "^TestRunRootless$", "-test.count", "1", "-test.timeout", "30m", "-test.v"}
	cmd := exec.Command(bin, args...)
	cmd.Dir = home
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + filepath.Join(home, "tmp"),
		"SKILLBOX_TEST_STATE=" + filepath.Join(home, "state"), "SKILLBOX_TEST_ROOTFS=" + rootfs,
		"SKILLBOX_TEST_RUNSC=" + binaryOf("runsc"), "SKILLBOX_TEST_LOG=" + os.Getenv("SKILLBOX_TEST_LOG"),
		rootlessChildEnv + "=1",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: rootlessTestUID, Gid: rootlessTestUID, Groups: []uint32{}}}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, testWriter{t}), io.MultiWriter(&out, testWriter{t})
	if err := cmd.Run(); err != nil {
		t.Fatalf("the case table as uid %d on gVisor rootless: %v", rootlessTestUID, err)
	}
	if !strings.Contains(out.String(), "--- PASS: TestRunRootless ") {
		t.Fatalf("the rootless test process ran no test:\n%s", out.String())
	}
	// Nothing of the user's is left running.
	if left := processesOf(rootlessTestUID, bin); len(left) > 0 {
		t.Errorf("processes of uid %d left: %v", rootlessTestUID, left)
	}
}

// testWriter passes a child's output on to the test log, line by line.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// processesOf lists the processes of uid whose command line mentions
// marker.
func processesOf(uid int, marker string) []string {
	var left []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", p.Name()), &st) != nil || int(st.Uid) != uid {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if strings.Contains(string(cmdline), marker) || strings.Contains(string(cmdline), filepath.Dir(marker)) {
			left = append(left, p.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return left
}
