package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
	"golang.org/x/sys/unix"
)

// A run's time limit must hold even when the process driving it dies
// (kill -9 of the daemon, an OOM kill, a crash): the runtime CLI dies with
// it (ocicli's startTied), but the container or sandbox it made lives on, and Sweep
// only removes it when a daemon starts again, which may be never. So every
// run has a watchdog: a small process of its own, started from this
// binary, in its own session and not tied to the daemon, that knows the
// run's cgroup and deadline. The daemon releases it when the run is torn
// down; if the daemon dies first, the watchdog SIGKILLs every process left
// in the run's cgroup (the container's processes under runc, the sandbox
// under runsc) at the deadline plus the grace period, and exits. Sweep, on
// the next start, removes what remains (container state, run dir, cgroup).

// watchdogArg0 is the argv[0] by which a process started from this binary
// knows it is a run's watchdog.
const watchdogArg0 = "skillbox-run-watchdog"

// WatchdogSlack is added to a run's deadline and grace before the watchdog
// acts, so that it never races a daemon that is alive and stopping the run.
const WatchdogSlack = 2 * time.Second

// The watchdog is this binary started again (/proc/self/exe), so it needs
// no helper installed next to it; a binary or test binary that links this
// package becomes the watchdog before its main or tests run when started
// under that name.
func init() {
	if len(os.Args) > 0 && os.Args[0] == watchdogArg0 {
		os.Exit(watchdogMain(os.Args[1:], os.Stdin, os.Stderr))
	}
}

// Watchdog is the daemon's handle on a job's or a sandbox's watchdog
// process (startWatchdog, StartSandboxWatchdog).
type Watchdog struct {
	cmd     *exec.Cmd
	release *os.File // write end of the watchdog's stdin
}

// StartWatchdog starts the watchdog of run id: unless released, it kills
// what is left in cgroup path cg at deadline. What it does it writes to
// logPath (in the run dir), never to the daemon's stderr, which it would
// otherwise hold open past the daemon's end.
func StartWatchdog(id, cg string, deadline time.Time, logPath string) (*Watchdog, error) {
	return spawnWatchdog([]string{watchdogArg0, id, cg, strconv.FormatInt(deadline.UnixNano(), 10)}, logPath)
}

// spawnWatchdog starts this binary as args[0] with args[1:], its stdin
// the read end of a pipe whose write end only the daemon holds.
func spawnWatchdog(args []string, logPath string) (*Watchdog, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("watchdog log: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("watchdog pipe: %w", err)
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path:   "/proc/self/exe",
		Args:   args,
		Stdin:  r,
		Stderr: logf,
		// Its own session: no signal meant for the daemon's terminal or
		// process group reaches it, and no Pdeathsig.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the run's watchdog: %w", err)
	}
	return &Watchdog{cmd: cmd, release: w}, nil
}

// Done releases the watchdog (the job is torn down) and reaps it; nil is
// fine.
func (w *Watchdog) Done() {
	if w == nil {
		return
	}
	_, _ = w.release.Write([]byte{'\n'})
	_ = w.release.Close()
	go func() { _ = w.cmd.Wait() }()
}

// watchdogMain is the watchdog process: args are the run id, its cgroup
// path and the deadline (Unix nanoseconds). A byte on release means the run
// was torn down by its daemon; end of file without one means the daemon is
// gone, and the deadline is kept here.
func watchdogMain(args []string, release io.Reader, log io.Writer) int {
	if len(args) != 3 {
		fmt.Fprintf(log, "%s: want run id, cgroup path and deadline\n", watchdogArg0)
		return 2
	}
	id, cg := args[0], args[1]
	ns, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil {
		fmt.Fprintf(log, "%s: deadline %q: %v\n", watchdogArg0, args[2], err)
		return 2
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	released := make(chan bool, 1)
	go func() {
		var b [1]byte
		n, _ := release.Read(b[:])
		released <- n > 0
	}()
	timer := time.NewTimer(time.Until(time.Unix(0, ns)))
	defer timer.Stop()
	why := "its daemon is gone"
	select {
	case ok := <-released:
		if ok {
			return 0
		}
		// The daemon died with the run in flight: keep its deadline.
		<-timer.C
	case <-timer.C:
		// The deadline passed with the daemon still holding the run: it
		// is stopping it now, or it is stuck; either way the run's time is
		// up.
		why = "its daemon had not stopped it"
	}
	if len(CgroupProcesses(cg)) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), KillWait)
	defer cancel()
	err = killCgroupProcs(ctx, cg)
	fmt.Fprintf(log, "skillbox: run %s outlived its deadline and %s; its processes were killed (cgroup %s)\n", id, why, cg)
	if err != nil {
		fmt.Fprintf(log, "skillbox: run %s: %v\n", id, err)
		return 1
	}
	return 0
}

// endWatchdogs SIGKILLs the watchdogs of run id (root's processes started
// as watchdogArg0 or SandboxWatchdogArg0 id ...), once Sweep has removed
// what they guarded; a sandbox's watchdog sweeping its run spares itself.
func endWatchdogs(id string) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) < 2 || args[0] != watchdogArg0 && args[0] != SandboxWatchdogArg0 || args[1] != id {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", p.Name()), &st) != nil || st.Uid != 0 {
			continue
		}
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// A sandbox that lives outside the daemon also when idle (a containerd
// task lives in its shim) has a watchdog from the moment it boots, not
// only from its job's delivery: a pooled sandbox waiting for a job would
// otherwise run on, with its container, snapshot and shim, until a daemon
// starts again and sweeps it, which may be never. Its watchdog
// (SandboxWatchdogArg0, run by the backend's package, see
// RunSandboxWatchdog) learns the job's deadline when the job is delivered
// (SetDeadline) and then keeps it like a job's watchdog. When the daemon
// dies it sweeps the run as Sweep would on the next start (the backend's
// container and task, the processes left in the cgroup, the cgroup, the
// workdir mount, the run dir): at once if no job was delivered, at the
// deadline if one was. It sweeps only a run dir whose lock is free, which
// no live daemon leaves.

// SandboxWatchdogArg0 is the argv[0] by which a process started from this
// binary knows it is a sandbox's watchdog; the backend that starts one
// dispatches on it in its own init (it alone knows how to delete its
// containers).
const SandboxWatchdogArg0 = "skillbox-sandbox-watchdog"

// deadlineMsg starts the line that gives a sandbox's watchdog its job's
// deadline (Unix nanoseconds follow); any other line releases it.
const deadlineMsg = "deadline "

// StartSandboxWatchdog starts the watchdog of sandbox id (see above), made
// from bundle b with cgroup path cg; extra are the backend's arguments,
// passed on to its RunSandboxWatchdog ops.
func StartSandboxWatchdog(id, cg string, b *oci.Bundle, extra []string) (*Watchdog, error) {
	args := append([]string{SandboxWatchdogArg0, id, cg, filepath.Dir(b.Dir)}, extra...)
	return spawnWatchdog(args, filepath.Join(b.Dir, oci.BundleWatchdogLog))
}

// SetDeadline tells a sandbox's watchdog the deadline of the job just
// delivered.
func (w *Watchdog) SetDeadline(deadline time.Time) error {
	if _, err := fmt.Fprintf(w.release, "%s%d\n", deadlineMsg, deadline.UnixNano()); err != nil {
		return fmt.Errorf("tell the sandbox's watchdog its deadline: %w", err)
	}
	return nil
}

// SweepOpsFunc gives a sandbox's watchdog the backend's operations on its
// containers (see SweepOps), from the backend's arguments; it is called
// only once the daemon is gone.
type SweepOpsFunc func(ctx context.Context, extra []string, log runtime.Logger) (SweepOps, error)

// lockedWait is how long SweepRun waits for a run dir's lock to be freed
// by a process that is ending.
const lockedWait = 5 * time.Second

// sandboxSweepTimeout bounds a sandbox watchdog's sweep.
const sandboxSweepTimeout = time.Minute

// RunSandboxWatchdog is the main of a sandbox's watchdog: args are the
// sandbox's id, cgroup path and run dir (the parent of its bundle), then
// the backend's; release is the daemon's pipe. It returns the exit code.
func RunSandboxWatchdog(args []string, release io.Reader, log io.Writer, ops SweepOpsFunc) int {
	if len(args) < 3 || !runtime.JobIDPattern.MatchString(args[0]) || !filepath.IsAbs(args[2]) {
		fmt.Fprintf(log, "%s: want sandbox id, cgroup path and run dir, then the backend's arguments\n", SandboxWatchdogArg0)
		return 2
	}
	id, cg, runDir, extra := args[0], args[1], filepath.Clean(args[2]), args[3:]
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	lg := hclog.New(&hclog.LoggerOptions{Name: SandboxWatchdogArg0, Output: log, Level: hclog.Info})
	w := &sandboxWatchdog{
		id: id, cg: cg, log: lg,
		procs:      CgroupProcesses,
		killCgroup: killCgroupProcs,
		sweep: func(ctx context.Context) error {
			o, err := ops(ctx, extra, lg)
			if err != nil {
				// Without the backend, what is on this host still goes;
				// its container is left to the next Sweep.
				lg.Error("cannot reach the backend to delete the sandbox's container", "id", id, "error", err)
				fail := func(context.Context, string) error { return err }
				o = SweepOps{State: func(context.Context, string) (*ContainerState, error) { return nil, err }, Delete: fail}
			}
			return SweepRun(ctx, runDir, id, lg, o)
		},
	}
	return w.run(release)
}

// sandboxWatchdog is one sandbox's watchdog; what it does to the host is
// in function fields so that its timing can be tested without root.
type sandboxWatchdog struct {
	id, cg     string
	log        runtime.Logger
	procs      func(cg string) []int
	killCgroup func(ctx context.Context, cg string) error
	sweep      func(ctx context.Context) error
}

func (w *sandboxWatchdog) run(release io.Reader) int {
	deadlines := make(chan time.Time)
	released := make(chan bool, 1)
	go func() {
		br := bufio.NewReader(release)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				// End of file, also inside a line: the daemon is gone.
				released <- false
				return
			}
			if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), deadlineMsg); ok {
				if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
					deadlines <- time.Unix(0, ns)
					continue
				}
			}
			released <- true
			return
		}
	}()
	var deadline time.Time
	var timer *time.Timer
	var expired <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
wait:
	for {
		select {
		case d := <-deadlines:
			deadline = d
			if timer != nil {
				timer.Stop()
			}
			timer = time.NewTimer(time.Until(d))
			expired = timer.C
		case <-expired:
			// The deadline passed with the daemon still holding the run:
			// it is stopping it now, or it is stuck; either way the job's
			// time is up. The daemon still removes the sandbox.
			expired = nil
			w.killLeft("its daemon had not stopped it")
		case ok := <-released:
			if ok {
				return 0
			}
			break wait
		}
	}
	if !deadline.IsZero() {
		// The daemon died with a job in flight: keep its deadline.
		time.Sleep(time.Until(deadline))
	}
	ctx, cancel := context.WithTimeout(context.Background(), sandboxSweepTimeout)
	defer cancel()
	what := "idle"
	if !deadline.IsZero() {
		what = "past its job's deadline"
	}
	w.log.Warn("the sandbox's daemon is gone; removing the sandbox", "id", w.id, "sandbox", what)
	if err := w.sweep(ctx); err != nil {
		w.log.Error("removing the sandbox of a dead daemon", "id", w.id, "error", err)
		return 1
	}
	w.log.Info("removed the sandbox of a dead daemon", "id", w.id)
	return 0
}

// killLeft kills what is left in the sandbox's cgroup.
func (w *sandboxWatchdog) killLeft(why string) {
	if len(w.procs(w.cg)) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), KillWait)
	defer cancel()
	err := w.killCgroup(ctx, w.cg)
	w.log.Warn("the job outlived its deadline and "+why+"; its processes were killed", "id", w.id, "cgroup", w.cg, "error", err)
}

// SweepRun is Sweep for the one run id in runDir, by a process other than
// the one that made it: removed only if its run dir's lock is free (its
// maker is dead), or, with the run dir gone, its container if that was
// made from it.
func SweepRun(ctx context.Context, runDir, id string, log runtime.Logger, ops SweepOps) error {
	s := NewSweeper(runDir, runtime.NamedLogger(log, "sweep"), ops)
	// The daemon's end closes its descriptors one by one, and the pipe
	// that told us may close before the run dir's lock does: a lock held
	// for a moment is the dying daemon's. One held on is a live run's (or
	// a Sweep's, which removes the run): say so rather than report a
	// removal that did not happen.
	dir := filepath.Join(runDir, id)
	giveUp := time.After(lockedWait)
	for {
		lock, err := oci.LockDir(dir, true)
		if lock != nil {
			lock.Close()
		}
		if !errors.Is(err, oci.ErrLocked) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run dir %s is locked by a live process; left to it: %w", dir, ctx.Err())
		case <-giveUp:
			return fmt.Errorf("run dir %s is locked by a live process (%s); left to it: %w", dir, lockHolders(dir), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	found, err := s.sweepRunDir(ctx, id)
	if found || err != nil {
		return err
	}
	return s.sweepContainer(ctx, ContainerState{ID: id, Bundle: filepath.Join(runDir, id)})
}

// lockHolders names the processes holding a lock on path (from /proc/locks).
func lockHolders(path string) string {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return "?"
	}
	raw, _ := os.ReadFile("/proc/locks")
	ino := strconv.FormatUint(st.Ino, 10)
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[5], ":"+ino) {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + f[4] + "/cmdline")
		out = append(out, f[4]+" "+strings.ReplaceAll(string(comm), "\x00", " "))
	}
	return strings.Join(out, "; ")
}
