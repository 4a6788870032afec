package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/oci"
)

// What every backend does with a sandbox's output and end: the same
// capture, end-of-run rules, outputs and teardown order, whatever started
// the process.

// Streams are a process's stdout and stderr: pipes whose write ends go to
// the process (WriteOut, WriteErr) and whose read ends, once Drain is
// called, are drained concurrently and capped at the job's limits, passing
// what is kept to the live sinks.
type Streams struct {
	WriteOut, WriteErr *os.File
	outR, errR         *os.File
	out, err           *oci.Capture
}

// NewStreams makes the pipes.
func NewStreams() (*Streams, error) {
	ps, err := MakePipes(2)
	if err != nil {
		return nil, err
	}
	return &Streams{WriteOut: ps[0].W, WriteErr: ps[1].W, outR: ps[0].R, errR: ps[1].R}, nil
}

// WaitReady reads the ready marker of a warm sandbox's first process from
// stdout, and nothing more (what follows is the job's), within timeout.
func (s *Streams) WaitReady(ctx context.Context, timeout time.Duration) error {
	return WaitReady(ctx, s.outR, timeout)
}

// WaitReady reads the ready marker from a warm sandbox's first process's
// stdout, and nothing more: what follows is the job's.
func WaitReady(ctx context.Context, outR *os.File, timeout time.Duration) error {
	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, len(readyMarker))
		_, err := io.ReadFull(outR, buf)
		if err == nil && string(buf) != readyMarker {
			err = fmt.Errorf("unexpected %q", buf)
		}
		ready <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-ready:
	case <-timer.C:
		err = fmt.Errorf("not ready after %s", timeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = outR.SetReadDeadline(time.Unix(1, 0)) // release the reader
	}
	return err
}

// FeedAndClose writes data to w in the background and closes it: a
// process's stdin (EPIPE, when it does not read all of it, is fine).
func FeedAndClose(w io.WriteCloser, data []byte) {
	go func() {
		_, _ = w.Write(data)
		_ = w.Close()
	}()
}

// Drain starts draining both pipes, capped at lim's stream caps.
func (s *Streams) Drain(lim runtime.Limits, stdout, stderr runtime.StreamSink) {
	lim = lim.WithDefaults()
	s.out, s.err = oci.NewCapture(lim.StdoutBytes, stdout), oci.NewCapture(lim.StderrBytes, stderr)
	go s.out.Drain(s.outR)
	go s.err.Drain(s.errR)
}

// Over is closed once stdout goes over its cap; OverErr once stderr does.
func (s *Streams) Over() <-chan struct{}    { return s.out.Over }
func (s *Streams) OverErr() <-chan struct{} { return s.err.Over }

// CloseWriters closes our copies of the write ends.
func (s *Streams) CloseWriters() {
	for _, f := range []*os.File{s.WriteOut, s.WriteErr} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// Finish closes the write ends and waits for both drains, at most
// drainWait each for a writer something else kept open.
func (s *Streams) Finish() {
	s.CloseWriters()
	WaitDrains(s.out, s.outR, s.err, s.errR)
}

// Close releases the read ends (after Finish, or when the job never ran).
func (s *Streams) Close() {
	s.CloseWriters()
	for _, f := range []*os.File{s.outR, s.errR} {
		_ = f.Close()
	}
}

// EndReason applies the rules every backend shares to a run that ended
// for reason (after Finish; see EndReason). limitHit says the cgroup
// counters explain the end.
func (s *Streams) EndReason(reason runtime.Reason, cgPath string) (_ runtime.Reason, limitHit bool) {
	reason, ev := EndReason(reason, s.out, s.err, cgPath)
	return reason, ev.OOMKills > 0 || ev.PidsMax > 0
}

// Fill puts the kept output and the outputs of the bundle's workdir into
// res (see fillResult).
func (s *Streams) Fill(res *runtime.Result, b *oci.Bundle, log runtime.Logger) {
	if log == nil {
		log = runtime.NamedLogger(nil, "")
	}
	FillResult(res, s.out, s.err, b, log)
}

// WaitDrains waits for the drains of both streams once their writers are
// gone; the deadline is for a write end something else kept open.
func WaitDrains(out *oci.Capture, outR *os.File, errc *oci.Capture, errR *os.File) {
	for _, d := range []struct {
		c *oci.Capture
		f *os.File
	}{{out, outR}, {errc, errR}} {
		select {
		case <-d.c.Done:
		case <-time.After(drainWait):
			oci.StopDraining(d.f)
			<-d.c.Done
		}
	}
}

// EndReason is why a run that ended for reason ended, once its drains are
// done (so the rule does not depend on timing): a script that went over an
// output cap and ended before our kill landed is the same run as one we
// killed, so the same reason, whatever won the race; then finalReason: a
// run whose forks pids.max refused is "pids", otherwise the limit that
// stopped the run names it, and the OOM counter only a run that ended on
// its own.
func EndReason(reason runtime.Reason, out, errc *oci.Capture, cgPath string) (runtime.Reason, CgroupEvents) {
	if reason == runtime.ReasonExit && (isClosed(out.Over) || isClosed(errc.Over)) {
		reason = runtime.ReasonOutputCap
	}
	ev := readCgroupEvents(cgPath)
	return finalReason(reason, ev), ev
}

// FillResult puts the kept output and what the script created or changed
// in the workdir into res. The run happened even when its outputs cannot
// be read back: that is said in the result rather than failing the run or
// returning nothing silently.
func FillResult(res *runtime.Result, out, errc *oci.Capture, b *oci.Bundle, log runtime.Logger) {
	res.Stdout, res.StdoutTruncated = out.Result()
	res.Stderr, res.StderrTruncated = errc.Result()
	outs, err := b.CollectOutputs()
	if err != nil {
		log.Warn("collecting outputs failed", "id", b.ID, "error", err)
		outs = &oci.Outputs{Skipped: []string{"outputs not collected: " + err.Error()}}
	}
	outs.Apply(res)
}

// ExitSignal names the signal of an exit code 128+n that both OCI runtimes
// report for a process killed by signal n ("" for other codes).
func ExitSignal(code int) string {
	if code > 128 && code < 128+65 {
		return unix.SignalName(syscall.Signal(code - 128))
	}
	return ""
}

// CreateRunscCgroup makes the cgroup runsc joins for a sandbox with
// limits lim (see Runsc): its memory limit and a pids limit scaled for
// gVisor's host tasks on platform.
func CreateRunscCgroup(cgPath string, lim runtime.Limits, platform string) error {
	lim = lim.WithDefaults()
	return CreateCgroup(cgPath, lim.MemoryBytes, RunscHostPids(lim.Pids, platform))
}

// ReleaseSandbox is the end of every backend's teardown, once the
// sandbox's processes are gone: its cgroup, egress plumbing (eg may be
// nil) and bundle are removed, and only then is its watchdog released, so
// that a daemon dying before the teardown is over leaves the job's
// deadline to the watchdog.
func ReleaseSandbox(ctx context.Context, cgPath string, eg *egress.Egress, b *oci.Bundle, wd *Watchdog) error {
	var errs []error
	if err := removeCgroupRetry(ctx, cgPath); err != nil {
		errs = append(errs, err)
	}
	if eg != nil {
		if err := eg.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.Remove(); err != nil {
		errs = append(errs, err)
	}
	wd.Done()
	return errors.Join(errs...)
}

// SweepRuns is Sweep for such a backend: the same rules over runDir (a
// locked run dir is a live run's; an unlocked one, a dead run's, goes with
// its container, cgroup and workdir mount; a container of ours whose run
// dir is gone is deleted).
func SweepRuns(ctx context.Context, runDir string, log runtime.Logger, ops SweepOps) error {
	s := NewSweeper(runDir, runtime.NamedLogger(log, "sweep"), ops)
	return s.Sweep(ctx)
}

// HolderArgv is the first process of a BootExec sandbox, SupervisorArgv
// that of a BootPython one; both say they are ready (see WaitReady).
func HolderArgv() []string     { return append([]string(nil), holderArgv...) }
func SupervisorArgv() []string { return []string{"python3", "-c", SupervisorSource} }
