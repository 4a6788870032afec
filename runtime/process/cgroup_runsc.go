package process

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// RunscHostPids is the host pids.max for a job allowed pids processes.
// systrap shares its stub processes between guest processes: measured on
// the pinned runsc, a guest process costs about two host tasks.
func RunscHostPids(pids int64, platform string) int64 {
	if platform == "systrap" {
		return pids*RunscPidsPerProcessSystrap + RunscPidsBase
	}
	return pids*RunscPidsPerProcess + RunscPidsBase
}

// CreateCgroup makes the run's memory and pids cgroups with their limits
// (memory+swap equal to memory where swap is accounted).
func CreateCgroup(p string, memory, pids int64) error {
	p = filepath.Clean("/" + p)
	mem := strconv.FormatInt(memory, 10)
	if IsCgroup2() {
		if err := enableControllers(filepath.Dir(p), "+memory +pids +cpu"); err != nil {
			return err
		}
		dir := filepath.Join(CgroupRoot, p)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("make cgroup: %w", err)
		}
		return writeFiles(dir, [][2]string{
			{"memory.max", mem}, {"memory.swap.max", "0"}, {"pids.max", strconv.FormatInt(pids, 10)},
		}, "memory.swap.max")
	}
	mdir := filepath.Join(CgroupRoot, "memory", p)
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return fmt.Errorf("make memory cgroup: %w", err)
	}
	if err := writeFiles(mdir, [][2]string{
		{"memory.limit_in_bytes", mem}, {"memory.memsw.limit_in_bytes", mem},
	}, "memory.memsw.limit_in_bytes"); err != nil {
		return err
	}
	pdir := filepath.Join(CgroupRoot, "pids", p)
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return fmt.Errorf("make pids cgroup: %w", err)
	}
	return writeFiles(pdir, [][2]string{{"pids.max", strconv.FormatInt(pids, 10)}}, "")
}

// writeFiles writes name=value pairs in dir; optional may be missing.
func writeFiles(dir string, kv [][2]string, optional string) error {
	for _, f := range kv {
		err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0)
		if err != nil && !(f[0] == optional && os.IsNotExist(err)) {
			return fmt.Errorf("set %s in %s: %w", f[0], dir, err)
		}
	}
	return nil
}

// enableControllers turns on controllers for the children of every level
// from the cgroup v2 root down to parent.
func enableControllers(parent, ctrl string) error {
	dir := CgroupRoot
	parts := strings.Split(strings.Trim(parent, "/"), "/")
	for i := 0; ; i++ {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(ctrl), 0); err != nil {
			return fmt.Errorf("enable %s in %s: %w", ctrl, dir, err)
		}
		if i >= len(parts) || parts[i] == "" {
			return nil
		}
		dir = filepath.Join(dir, parts[i])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("make cgroup: %w", err)
		}
	}
}

// Host pids per guest process and the sandbox's own baseline; measured on
// runsc 20221219 with the ptrace platform (about 5-6 host tasks per sleeping
// guest process, 20-45 for the sentry, gofer and stubs).
const (
	RunscPidsPerProcess        = 8
	RunscPidsPerProcessSystrap = 2
	RunscPidsBase              = 64
)

// CreateDelegatedCgroup makes a rootless run's cgroup p in the user's
// delegated cgroup v2 subtree (runtime/rootless): its parent already has
// the controllers enabled for children, and nothing above it is ours to
// touch. cpus 0 leaves the CPU quota unset (no cpu controller delegated).
func CreateDelegatedCgroup(p string, memory, pids int64, cpus float64) error {
	dir := filepath.Join(CgroupRoot, filepath.Clean("/"+p))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("make cgroup %s: %w", dir, err)
	}
	kv := [][2]string{
		{"memory.max", strconv.FormatInt(memory, 10)}, {"memory.swap.max", "0"}, {"pids.max", strconv.FormatInt(pids, 10)},
	}
	if cpus > 0 {
		kv = append(kv, [2]string{"cpu.max", CPUMax(cpus)})
	}
	return writeFiles(dir, kv, "memory.swap.max")
}

// CPUMax is cgroup v2's cpu.max for a quota of cpus CPUs over a 100 ms
// period (at least 1 ms, the kernel's minimum).
func CPUMax(cpus float64) string {
	quota := int64(cpus * 100000)
	if quota < 1000 {
		quota = 1000
	}
	return strconv.FormatInt(quota, 10) + " 100000"
}
