package process

import (
	"os/exec"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		want Proc
		ok   bool
	}{
		{"plain", "42 (sleep) S 7 42 42 0 -1", Proc{PID: 42, PPID: 7, SID: 42, State: 'S'}, true},
		{"name with spaces and parens", "42 (a) b (c)) Z 1 5 6 0", Proc{PID: 42, PPID: 1, SID: 6, State: 'Z'}, true},
		{"no name", "42 sleep S 7 42 42", Proc{}, false},
		{"short", "42 (x) S 7", Proc{}, false},
		{"bad ppid", "42 (x) S seven 1 1", Proc{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseStat(42, []byte(tc.line))
			if ok != tc.ok || got != tc.want {
				t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestDescendants(t *testing.T) {
	procs := []Proc{{PID: 1}, {PID: 10, PPID: 1}, {PID: 11, PPID: 10}, {PID: 12, PPID: 11}, {PID: 20, PPID: 1}}
	got := Descendants(procs, 10)
	if len(got) != 2 || !got[11] || !got[12] {
		t.Errorf("Descendants of 10 = %v, want 11 and 12", got)
	}
}

// TestKillTree kills a shell and the processes it forked, grandchildren
// included, and leaves none of them running.
func TestKillTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sh -c 'sleep 300 & sleep 300 & wait' & sleep 300 & echo ready; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 6)
		_, _ = out.Read(buf)
		done <- nil
	}()
	<-done
	var tree map[int]bool
	waitfor.Within(10*time.Second, func() bool {
		procs, err := ReadProcs()
		if err != nil {
			t.Fatal(err)
		}
		tree = Descendants(procs, cmd.Process.Pid)
		return len(tree) >= 4
	})
	if len(tree) < 4 {
		t.Fatalf("the shell made %d processes, want 4", len(tree))
	}
	reaped := make(chan struct{})
	go func() { _ = cmd.Wait(); close(reaped) }()
	if err := KillTree(cmd.Process.Pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	<-reaped
	// The orphans are init's to reap: only a zombie may be left for a moment.
	left := liveOf(tree)
	if len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
}
