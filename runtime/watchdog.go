package runtime

import (
	"context"
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

	"golang.org/x/sys/unix"
)

// A run's time limit must hold even when the process driving it dies
// (kill -9 of the daemon, an OOM kill, a crash): the runtime CLI dies with
// it (startTied), but the container or sandbox it made lives on, and Sweep
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

// watchdogSlack is added to a run's deadline and grace before the watchdog
// acts, so that it never races a daemon that is alive and stopping the run.
const watchdogSlack = 2 * time.Second

// The watchdog is this binary started again (/proc/self/exe), so it needs
// no helper installed next to it; a binary or test binary that links this
// package becomes the watchdog before its main or tests run when started
// under that name.
func init() {
	if len(os.Args) > 0 && os.Args[0] == watchdogArg0 {
		os.Exit(watchdogMain(os.Args[1:], os.Stdin, os.Stderr))
	}
}

// Watchdog is the daemon's handle on a job's watchdog process (see
// StartWatchdog).
type Watchdog struct {
	cmd     *exec.Cmd
	release *os.File // write end of the watchdog's stdin
}

// startWatchdog starts the watchdog of run id: unless released, it kills
// what is left in cgroup path cg at deadline. What it does it writes to
// logPath (in the run dir), never to the daemon's stderr, which it would
// otherwise hold open past the daemon's end.
func startWatchdog(id, cg string, deadline time.Time, logPath string) (*Watchdog, error) {
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
		Args:   []string{watchdogArg0, id, cg, strconv.FormatInt(deadline.UnixNano(), 10)},
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
	if len(cgroupProcs(cg)) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
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
// as watchdogArg0 id ...), once Sweep has removed what they guarded.
func endWatchdogs(id string) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) < 2 || args[0] != watchdogArg0 || args[1] != id {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", p.Name()), &st) != nil || st.Uid != 0 {
			continue
		}
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}
