package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Each run has a fixed cgroup path (CgroupParent/<id>), so after the
// container's process has ended but before the runtime deletes the
// container, its counters tell why it ended: the memory controller counts
// OOM kills, the pids controller counts refused forks. Both cgroup v1 (the
// hybrid hierarchy this project's hosts use) and v2 are read.

const CgroupRoot = "/sys/fs/cgroup"

// CgroupEvents are the counters that explain a run's end.
type CgroupEvents struct {
	OOMKills int64 // processes the kernel OOM-killed in the cgroup
	PidsMax  int64 // forks refused because of pids.max
	MemFail  int64 // times memory usage hit the limit (v1 memory.failcnt)
}

func IsCgroup2() bool {
	var st unix.Statfs_t
	return unix.Statfs(CgroupRoot, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// cgroupDirs returns every host directory that backs cgroup path p.
func cgroupDirs(p string) []string {
	p = filepath.Clean("/" + p)
	if IsCgroup2() {
		return []string{filepath.Join(CgroupRoot, p)}
	}
	entries, err := os.ReadDir(CgroupRoot)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue // links such as cpu,cpuacct -> cpu
		}
		dirs = append(dirs, filepath.Join(CgroupRoot, e.Name(), p))
	}
	return dirs
}

// readCgroupEvents reads the OOM and pids counters of cgroup path p. Missing
// files read as zero: not every host has every controller.
func readCgroupEvents(p string) CgroupEvents {
	p = filepath.Clean("/" + p)
	var ev CgroupEvents
	if IsCgroup2() {
		dir := filepath.Join(CgroupRoot, p)
		ev.OOMKills = keyedValue(filepath.Join(dir, "memory.events"), "oom_kill")
		ev.PidsMax = keyedValue(filepath.Join(dir, "pids.events"), "max")
		return ev
	}
	ev.OOMKills = keyedValue(filepath.Join(CgroupRoot, "memory", p, "memory.oom_control"), "oom_kill")
	ev.MemFail = singleValue(filepath.Join(CgroupRoot, "memory", p, "memory.failcnt"))
	ev.PidsMax = keyedValue(filepath.Join(CgroupRoot, "pids", p, "pids.events"), "max")
	return ev
}

// keyedValue reads "key value" lines and returns value for key (0 if absent).
func keyedValue(file, key string) int64 {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func singleValue(file string) int64 {
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	return n
}

// removeCgroup removes the run's cgroup directories the runtime left behind
// (children first). A cgroup that still has tasks cannot be removed; that is
// reported.
func removeCgroup(p string) error {
	if p == "" || filepath.Clean("/"+p) == "/" {
		return nil
	}
	var errs []error
	for _, dir := range cgroupDirs(p) {
		if err := removeCgroupDir(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeCgroupDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupDir(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	// cgroupfs directories are removed with rmdir even though they list files.
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir cgroup", Path: dir, Err: err}
	}
	return nil
}

// killCgroupProcs SIGKILLs every process in cgroup path p and its children
// until none is left. Sweep uses it on the cgroup of a dead run only.
func killCgroupProcs(ctx context.Context, p string) error {
	if p == "" || filepath.Clean("/"+p) == "/" {
		return nil
	}
	giveUp := time.After(KillWait)
	for {
		pids := CgroupProcesses(p)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes left in cgroup %s: %w", p, ctx.Err())
		case <-giveUp:
			return fmt.Errorf("processes %v left in cgroup %s after SIGKILL", pids, p)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CgroupProcesses lists the processes in cgroup path p and its children, in
// every hierarchy (a process shows up once per hierarchy on cgroup v1).
func CgroupProcesses(p string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, dir := range cgroupDirs(p) {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			raw, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(raw)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// SetBackgroundWeight gives cgroup path p a low CPU weight (a sandbox booting in
// the background) or the normal one back (its job runs). The cgroup is
// made if it is not there yet; both runtimes join an existing one.
func SetBackgroundWeight(p string, low bool) error {
	p = filepath.Clean("/" + p)
	if IsCgroup2() {
		w := "100"
		if low {
			w = "1"
		}
		dir := filepath.Join(CgroupRoot, p)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte(w), 0)
	}
	w := "1024"
	if low {
		w = "2"
	}
	dir := filepath.Join(CgroupRoot, "cpu", p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(w), 0)
}
