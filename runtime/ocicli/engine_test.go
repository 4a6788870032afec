package ocicli

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
)

const tiedHelperEnv = "SKILLBOX_TEST_TIED_HELPER"

// TestStartTiedHelper is the process that dies in TestStartTied.
func TestStartTiedHelper(t *testing.T) {
	if os.Getenv(tiedHelperEnv) == "" {
		t.Skip("helper of TestStartTied")
	}
	cmd := exec.Command("sleep", "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // as ociCLI.command
	if _, err := startTied(cmd); err != nil {
		fmt.Println("start:", err)
		os.Exit(2)
	}
	fmt.Println("child", cmd.Process.Pid)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

// TestStartTied: a runtime CLI started by a process that is killed -9 does
// not outlive it, although it runs in its own process group.
func TestStartTied(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("needs sleep(1)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartTiedHelper$")
	cmd.Env = append(os.Environ(), tiedHelperEnv+"=1")
	out, _ := cmd.Output()
	var pid int
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "child" {
			pid, _ = strconv.Atoi(f[1])
		}
	}
	if pid <= 0 {
		t.Fatalf("helper did not start its child: %q", out)
	}
	// Generous: the kernel kills it at once; reaping it takes init a moment.
	if !waitfor.Within(60*time.Second, func() bool { return !alive(pid) }) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("child %d of the killed helper still runs", pid)
	}
}

// alive reports whether pid is a live (not zombie) sleep process.
func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || !strings.Contains(s[:i], "(sleep") {
		return false
	}
	f := strings.Fields(s[i+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
