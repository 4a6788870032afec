package ocicli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A rootless sandbox has no cgroup, and runsc then drops the spec's memory
// limit without a word (this gVisor has no memory limit of its own). So
// skillbox holds it: memoryWatch samples what the sandbox uses and kills it
// above the limit, and the run ends with reason oom, as a cgroup's OOM kill
// would end it. What a sandbox uses is the sentry's memory file (every page
// of the guest: its processes, its tmpfs mounts, its page cache) plus the
// sentry's own anonymous memory (its Go heap, its kernel objects). The
// memory file is a memfd the sentry holds open; its allocated blocks are
// read with one fstat through /proc, cheaply and without asking runsc. The
// watch fails closed: a sandbox whose memory file cannot be found is killed
// rather than left to run without a limit.

// memorySample is how often the watch samples. The limit may be passed by
// what the script allocates in one interval (a few MiB at the rates a
// sandbox allocates at).
const memorySample = 50 * time.Millisecond

// memoryFileWait is how long after the sandbox process appears its memory
// file may take to show up before the watch gives up (and kills it).
const memoryFileWait = 10 * time.Second

// sentryMemoryFile is the link target of the sentry's memory file in
// /proc/PID/fd (gVisor's loader names it).
const sentryMemoryFile = "/memfd:runsc-memory (deleted)"

// sandboxArg0 is the argv[0] of runsc's sandbox (sentry) process.
const sandboxArg0 = "runsc-sandbox"

// With a delegated cgroup (runtime.Options.Delegated) the kernel holds the
// limit, and the watch only checks, once the sandbox runs, that it is in
// the run's cgroup: a sandbox that is not, whatever the reason, is killed
// rather than left without its limits (watchCgroup).

type memoryWatch struct {
	limit  int64
	cgroup string // delegated: the run's cgroup the sandbox must be in
	cli    int    // pid of the runsc CLI whose child the sandbox is
	stop   chan struct{}
	done   chan struct{}

	mu     sync.Mutex
	killed bool  // the sandbox went over the limit and was killed
	err    error // the watch could not hold the limit (and killed it)
	peak   int64
}

// watchMemory starts watching the sandbox that runsc CLI process cli
// starts; Stop ends the watch.
func watchMemory(cli int, limit int64) *memoryWatch {
	w := &memoryWatch{limit: limit, cli: cli, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// watchCgroup starts checking that the sandbox runsc CLI process cli
// starts joins cgroup (a cgroup v2 path); Stop ends it.
func watchCgroup(cli int, cgroup string) *memoryWatch {
	w := &memoryWatch{cgroup: cgroup, cli: cli, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Stop ends the watch and reports whether it killed the sandbox over the
// limit, and why the limit could not be held if it could not.
func (w *memoryWatch) Stop() (overLimit bool, peak int64, err error) {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.killed, w.peak, w.err
}

func (w *memoryWatch) run() {
	defer close(w.done)
	t := time.NewTicker(memorySample)
	defer t.Stop()
	sandbox, memfd := -1, -1
	defer func() {
		if memfd >= 0 {
			unix.Close(memfd)
		}
	}()
	var sandboxSeen time.Time
	started := time.Now()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if sandbox < 0 {
			if sandbox = childNamed(w.cli, sandboxArg0); sandbox < 0 {
				if processGone(w.cli) || processExited(w.cli) {
					return
				}
				if time.Since(started) > memoryFileWait {
					// Without the sandbox there is no limit: the run
					// goes (the CLI's death takes its sandbox along).
					w.fail(w.cli, fmt.Errorf("the sandbox process of runsc (pid %d) was not found within %s, so its memory limit cannot be enforced without root", w.cli, memoryFileWait))
					return
				}
				continue
			}
			sandboxSeen = time.Now()
			if w.cgroup != "" {
				if err := inCgroup(sandbox, w.cgroup); err != nil && !processGone(sandbox) && !processExited(sandbox) {
					w.fail(sandbox, err)
				}
				return
			}
		}
		if memfd < 0 {
			fd, err := openSentryMemory(sandbox)
			if err != nil {
				if processGone(sandbox) || processExited(sandbox) {
					return
				}
				if time.Since(sandboxSeen) > memoryFileWait {
					w.fail(sandbox, fmt.Errorf("the sandbox's memory file (%s) was not found in /proc/%d/fd within %s (%v), so its memory limit cannot be enforced without root; this runsc may name it otherwise: use the pinned runsc, or run skillbox as root", sentryMemoryFile, sandbox, memoryFileWait, err))
					return
				}
				continue
			}
			memfd = fd
		}
		used, err := sandboxMemory(sandbox, memfd)
		if err != nil {
			if processGone(sandbox) || processExited(sandbox) {
				return
			}
			w.fail(sandbox, fmt.Errorf("read the sandbox's memory use: %w", err))
			return
		}
		w.mu.Lock()
		if used > w.peak {
			w.peak = used
		}
		w.mu.Unlock()
		if used > w.limit {
			_ = unix.Kill(sandbox, unix.SIGKILL)
			w.mu.Lock()
			w.killed = true
			w.mu.Unlock()
			return
		}
	}
}

func (w *memoryWatch) fail(sandbox int, err error) {
	_ = unix.Kill(sandbox, unix.SIGKILL)
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// sandboxMemory is the memory file's allocated bytes plus the sentry's
// anonymous memory.
func sandboxMemory(pid, memfd int) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(memfd, &st); err != nil {
		return 0, err
	}
	anon, err := statusKiB(pid, "RssAnon:")
	if errors.Is(err, errNoStatusLine) {
		anon = 0 // exiting: its memory is gone already
	} else if err != nil {
		return 0, err
	}
	return st.Blocks*512 + anon<<10, nil
}

// errNoStatusLine: a process that has released its memory while it exits
// has no memory lines in its status.
var errNoStatusLine = errors.New("no such line in the process's status")

// openSentryMemory opens the sandbox's memory file through /proc; the
// descriptor stays valid whatever happens to the pid.
func openSentryMemory(pid int) (int, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1, err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if target, err := os.Readlink(p); err == nil && target == sentryMemoryFile {
			return unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		}
	}
	return -1, fmt.Errorf("no such descriptor among %d", len(ents))
}

// childNamed finds the child of pid whose argv[0] is name (-1: none yet),
// from /proc/PID/task/*/children, or, on a kernel without those files, from
// every process's parent.
func childNamed(pid int, name string) int {
	var children []string
	tasks, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	listed := false
	for _, t := range tasks {
		raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", t.Name(), "children"))
		if err != nil {
			continue
		}
		listed = true
		children = append(children, strings.Fields(string(raw))...)
	}
	if !listed {
		children = childrenByParent(pid)
	}
	for _, f := range children {
		child, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", f, "cmdline"))
		if err != nil {
			continue
		}
		if arg0, _, _ := strings.Cut(string(cmdline), "\x00"); arg0 == name {
			return child
		}
	}
	return -1
}

// childrenByParent lists the processes whose parent is pid.
func childrenByParent(pid int) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		raw, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := strings.LastIndexByte(string(raw), ')')
		if i < 0 {
			continue
		}
		if fs := strings.Fields(string(raw[i+1:])); len(fs) > 1 && fs[1] == strconv.Itoa(pid) {
			out = append(out, p.Name())
		}
	}
	return out
}

// statusKiB reads a "Key: N kB" line of /proc/PID/status.
func statusKiB(pid int, key string) (int64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				return strconv.ParseInt(fs[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, key, errNoStatusLine)
}

func processGone(pid int) bool {
	return unix.Kill(pid, 0) == unix.ESRCH
}

// processExited reports whether pid has exited and not been waited for
// yet (a zombie: its status has no memory lines any more).
func processExited(pid int) bool {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := strings.LastIndexByte(string(raw), ')')
	return i < 0 || i+2 >= len(raw) || raw[i+2] == 'Z' || raw[i+2] == 'X'
}

// inCgroup checks that pid is in cgroup v2 cgroup p (or below it).
func inCgroup(pid int, p string) error {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return fmt.Errorf("read the sandbox's cgroup: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if got, ok := strings.CutPrefix(line, "0::"); ok {
			if got == p || strings.HasPrefix(got, p+"/") {
				return nil
			}
			return fmt.Errorf("the sandbox (pid %d) is in cgroup %s, not in its run's %s, so its limits would not hold", pid, got, p)
		}
	}
	return fmt.Errorf("the sandbox (pid %d) is in no cgroup v2 cgroup, so its limits would not hold", pid)
}
