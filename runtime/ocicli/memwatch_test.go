package ocicli

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
)

// The watch's view of /proc: a child found by its argv[0], a process's
// anonymous memory, and a zombie told apart from a live process.
func TestMemoryWatchProc(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep: %v", err)
	}
	cmd := exec.Command(sleep, "30")
	cmd.Args[0] = sandboxArg0
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var child int
	waitfor.Within(time.Second, func() bool { child = childNamed(os.Getpid(), sandboxArg0); return child > 0 })
	if child != cmd.Process.Pid {
		t.Fatalf("childNamed = %d, want %d", child, cmd.Process.Pid)
	}
	if !slices.Contains(childrenByParent(os.Getpid()), strconv.Itoa(child)) {
		t.Errorf("childrenByParent does not list %d", child)
	}
	if anon, err := statusKiB(child, "RssAnon:"); err != nil || anon < 0 {
		t.Errorf("RssAnon of a live process: %d %v", anon, err)
	}
	if processExited(child) {
		t.Error("a sleeping process counts as exited")
	}
	cmd.Process.Kill()
	if !waitfor.Within(time.Second, func() bool { return processExited(child) }) {
		t.Error("a killed, unwaited child is not seen as exited")
	}
	cmd.Wait()
	if !processGone(child) {
		t.Error("a waited child is not gone")
	}
	if _, err := openSentryMemory(os.Getpid()); err == nil {
		t.Error("this process has no sentry memory file")
	}
}

func TestInCgroup(t *testing.T) {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip(err)
	}
	var mine string
	for _, line := range strings.Split(string(raw), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			mine = p
		}
	}
	if mine == "" {
		if err := inCgroup(os.Getpid(), "/x"); err == nil || !strings.Contains(err.Error(), "no cgroup v2") {
			t.Errorf("a process in no v2 cgroup: %v", err)
		}
		return
	}
	if err := inCgroup(os.Getpid(), mine); err != nil {
		t.Errorf("this process in its own cgroup %s: %v", mine, err)
	}
	if err := inCgroup(os.Getpid(), "/surely/not/this/one"); err == nil {
		t.Error("this process is not in /surely/not/this/one")
	}
}
