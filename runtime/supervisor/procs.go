package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// proc is one process as /proc/PID/stat has it.
type proc struct {
	pid, ppid, sid int
	state          byte
}

// readProcs lists the processes of /proc. One that ends while it is read
// is left out.
func readProcs() ([]proc, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	out := make([]proc, 0, len(names))
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
func parseStat(pid int, b []byte) (proc, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return proc{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	sid, err2 := strconv.Atoi(string(f[3]))
	if err1 != nil || err2 != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, sid: sid, state: f[0][0]}, true
}

// descendants is the set of processes below root.
func descendants(procs []proc, root int) map[int]bool {
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
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
