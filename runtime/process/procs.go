package process

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Proc is one process as /proc/PID/stat has it.
type Proc struct {
	PID, PPID, SID int
	State          byte // R, S, D, T, Z, X, ...
}

// Gone reports whether the process has ended (a zombie waits only for its
// parent to reap it).
func (p Proc) Gone() bool { return p.State == 'Z' || p.State == 'X' }

// ReadProcs lists the processes of /proc. One that ends while it is read
// is left out.
func ReadProcs() ([]Proc, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	out := make([]Proc, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		if p, ok := parseStat(pid, b); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// parseStat reads state, ppid and session (fields 3, 4 and 6) of a stat
// line; the command name (field 2) may hold spaces and parentheses, so the
// fields are counted from its last ')'.
func parseStat(pid int, b []byte) (Proc, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Proc{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return Proc{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	sid, err2 := strconv.Atoi(string(f[3]))
	if err1 != nil || err2 != nil {
		return Proc{}, false
	}
	return Proc{PID: pid, PPID: ppid, SID: sid, State: f[0][0]}, true
}

// Descendants is the set of processes below root.
func Descendants(procs []Proc, root int) map[int]bool {
	children := map[int][]int{}
	for _, p := range procs {
		children[p.PPID] = append(children[p.PPID], p.PID)
	}
	out := map[int]bool{}
	todo := []int{root}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, c := range children[p] {
			if !out[c] {
				out[c] = true
				todo = append(todo, c)
			}
		}
	}
	return out
}

// maxTreePasses bounds the passes KillTree makes to stop a tree that keeps
// forking; each pass stops every process it finds, so new ones can only be
// children forked just before.
const maxTreePasses = 50

// KillTree kills root and every process below it, and waits up to wait
// for all of them to end. The tree is stopped (SIGSTOP) first, pass after
// pass until a pass finds no process it has not stopped, then killed:
// killing a parent first would hand its children to init, out of sight,
// where they could go on with what the parent started (a runtime CLI
// making a container's cgroup after it was removed, say).
func KillTree(root int, wait time.Duration) error {
	stopped := map[int]bool{}
	for pass := 0; pass < maxTreePasses; pass++ {
		procs, err := ReadProcs()
		if err != nil {
			return fmt.Errorf("kill process tree of %d: %w", root, err)
		}
		tree := Descendants(procs, root)
		tree[root] = true
		n := 0
		for _, p := range procs {
			if !tree[p.PID] || stopped[p.PID] || p.Gone() {
				continue
			}
			if unix.Kill(p.PID, unix.SIGSTOP) == nil {
				stopped[p.PID] = true
				n++
			}
		}
		if n == 0 {
			break
		}
	}
	for pid := range stopped {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	deadline := time.Now().Add(wait)
	for {
		left := liveOf(stopped)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kill process tree of %d: processes %v still alive %v after SIGKILL", root, left, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// liveOf lists the processes of pids that have not ended.
func liveOf(pids map[int]bool) []int {
	var left []int
	for pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		if p, ok := parseStat(pid, b); ok && !p.Gone() {
			left = append(left, pid)
		}
	}
	return left
}
