package ocicli

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/runtime/process"
	"github.com/skillbox/skillbox/runtime/supervisor"
)

// request is the supervisor's request for a run of inv.
func (s *sessionSandbox) request(ctx context.Context, runID string, inv runtime.Invocation) (supervisor.Request, runtime.Job, error) {
	select {
	case <-s.done:
		return supervisor.Request{}, runtime.Job{}, s.gone()
	default:
	}
	if !runtime.JobIDPattern.MatchString(runID) {
		return supervisor.Request{}, runtime.Job{}, errkind.Errorf(runtime.ErrInvalidJob, "run id %q must be [a-zA-Z0-9_-]", runID)
	}
	job, err := runtime.Accept(ctx, s.spec, inv)
	if err != nil {
		return supervisor.Request{}, runtime.Job{}, err
	}
	env, err := runtime.ContainerEnv(job.Invocation.Env)
	if err != nil {
		return supervisor.Request{}, runtime.Job{}, err
	}
	if err := s.b.WriteSessionInputs(job.Invocation.Files); err != nil {
		return supervisor.Request{}, runtime.Job{}, err
	}
	req := supervisor.Request{Op: supervisor.OpRun, ID: runID, Argv: job.Invocation.Args, Env: append(env, job.Invocation.ModuleEnv...),
		Cwd: runtime.WorkDir, Stdin: job.Invocation.Stdin, Python: runtime.PythonInvocation(job.Invocation.Args)}
	return req, job, nil
}

func (s *sessionSandbox) Run(ctx context.Context, runID string, inv runtime.Invocation) (*runtime.Result, error) {
	s.fg.Lock()
	defer s.fg.Unlock()
	req, job, err := s.request(ctx, runID, inv)
	if err != nil {
		return nil, err
	}
	lim := job.Limits()
	before, err := s.b.WorkdirState()
	if err != nil {
		return nil, err
	}
	cgBefore := process.ReadCgroupEvents(s.cgPath)
	caps := oci.NewCaptures(lim, job.Invocation)
	outCap, errCap, closeStreams := caps.Out, caps.Err, caps.Close
	started := time.Now()
	run, err := s.client.Start(ctx, req, caps.Stdout, caps.Stderr)
	if err != nil {
		closeStreams()
		return nil, s.runError(runID, err)
	}
	_, exited, reason := process.AwaitEnd(ctx, run.Done(), process.Ends{
		Left: lim.Timeout - time.Since(started), StdoutOver: outCap.Over, StderrOver: errCap.Over,
	})
	if !exited {
		if err := s.client.Stop(ctx, run, reason == runtime.ReasonTimeout, s.e.grace); err != nil {
			// A supervisor that cannot stop a run is not one to trust
			// with the next: the sandbox goes.
			closeStreams()
			_ = s.Destroy(ctx)
			return nil, fmt.Errorf("run %s: %w", runID, err)
		}
	}
	duration := time.Since(started)
	closeStreams()
	ex := run.Exit()
	if run.Err() != nil {
		// The sandbox went down under the run: at its memory or pids
		// limit (the host kernel kills the whole sandbox at its cgroup's
		// limits), which the result says as for any run, or for another
		// reason, which is an error; either way it goes, and the session's
		// next run gets a new one.
		defer func() { go s.Destroy(context.Background()) }()
		if ev := process.ReadCgroupEvents(s.cgPath); ev.OOMKills <= cgBefore.OOMKills && ev.PidsMax <= cgBefore.PidsMax {
			return nil, errkind.Errorf(runtime.ErrUnavailable, "run %s: session sandbox %s went down during the run (%v); the session's next run starts a new one", runID, s.spec.ID, run.Err())
		}
		ex = supervisor.Exit{Code: 128 + int(syscall.SIGKILL), Signal: "SIGKILL"}
	}
	reason, ev := process.SessionEndReason(reason, outCap, errCap, s.cgPath, cgBefore)
	res := &runtime.Result{Duration: duration, Summary: outcome.Summary{
		ExitCode: ex.Code, Signal: ex.Signal, Reason: reason,
		Runtime: s.e.name, RuntimeVersion: s.version, Warm: true, LimitsEnforcedBy: s.e.d.enforcement(),
	}}
	caps.Fill(res)
	outs, err := s.b.CollectChanges(before, lim)
	if err != nil {
		s.e.log.Warn("collecting outputs failed", "id", s.spec.ID, "run_id", runID, "error", err)
		outs = &oci.Outputs{Skipped: []string{"outputs not collected: " + err.Error()}}
	}
	outs.Apply(res)
	s.e.log.Debug("session run finished", "id", s.spec.ID, "run_id", runID, "reason", reason, "exit_code", ex.Code,
		"signal", ex.Signal, "duration", duration, "oom_kills", ev.OOMKills, "pids_max_events", ev.PidsMax)
	return res, nil
}

// runError says why a run could not start: the program is missing (the
// supervisor's message), or the sandbox is gone.
func (s *sessionSandbox) runError(runID string, err error) error {
	if errors.Is(err, supervisor.ErrStart) {
		return errkind.Errorf(runtime.ErrInvalidJob, "run %s: %w", runID, err)
	}
	select {
	case <-s.done:
		return s.gone()
	default:
	}
	return fmt.Errorf("run %s: %w", runID, err)
}

func (s *sessionSandbox) Background(ctx context.Context, runID string, inv runtime.Invocation) (runtime.BackgroundRun, error) {
	req, _, err := s.request(ctx, runID, inv)
	if err != nil {
		return runtime.BackgroundRun{}, err
	}
	req.Background = true
	req.Python = false
	req.Log = runtime.SessionRunsDir + "/" + runID + ".log"
	br := &runtime.BackgroundRun{ID: runID, Log: req.Log, Started: time.Now().UTC(), Running: true,
		LogHost: filepath.Join(s.b.Workdir, path.Base(runtime.SessionStateDir), path.Base(runtime.SessionRunsDir), runID+".log")}
	s.mu.Lock()
	if _, dup := s.bg[runID]; dup {
		s.mu.Unlock()
		return runtime.BackgroundRun{}, errkind.Errorf(runtime.ErrInvalidJob, "run %s exists already in session sandbox %s", runID, s.spec.ID)
	}
	s.bg[runID] = br
	s.mu.Unlock()
	run, err := s.client.Start(ctx, req, nil, nil)
	if err != nil {
		s.mu.Lock()
		delete(s.bg, runID)
		s.mu.Unlock()
		return runtime.BackgroundRun{}, s.runError(runID, err)
	}
	s.mu.Lock()
	br.PID = run.PID()
	out := *br
	s.mu.Unlock()
	go func() {
		select {
		case <-run.Done():
			if run.Err() == nil { // an exit, not the supervisor going away
				s.backgroundExited(runID, run.Exit())
			}
		case <-s.done:
		}
	}()
	return out, nil
}

// backgroundExited records a background run's end (once) and reports it.
func (s *sessionSandbox) backgroundExited(runID string, ex supervisor.Exit) {
	s.mu.Lock()
	br := s.bg[runID]
	if br == nil || !br.Running {
		s.mu.Unlock()
		return
	}
	br.Running, br.ExitCode, br.Signal = false, ex.Code, ex.Signal
	out := *br
	s.mu.Unlock()
	if f := s.spec.OnBackgroundExit; f != nil {
		f(out)
	}
}

func (s *sessionSandbox) Signal(ctx context.Context, runID string, sig syscall.Signal) error {
	s.mu.Lock()
	br := s.bg[runID]
	running := br != nil && br.Running
	s.mu.Unlock()
	if br == nil {
		return errkind.Errorf(runtime.ErrInvalidJob, "no background run %s in session sandbox %s", runID, s.spec.ID)
	}
	if !running {
		return nil // ended already: nothing to signal
	}
	return s.client.Signal(ctx, runID, sig)
}

func (s *sessionSandbox) Runs(context.Context) ([]runtime.BackgroundRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]runtime.BackgroundRun, 0, len(s.bg))
	for _, br := range s.bg {
		out = append(out, *br)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out, nil
}
