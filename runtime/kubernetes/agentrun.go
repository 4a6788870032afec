package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/runtime/process"
	"github.com/skillbox/skillbox/runtime/supervisor"
	"github.com/skillbox/skillbox/runtime/tarstream"
)

// A run over the agent (agent.go): the skill's files go into the pod's
// skill directory, read-only to the job, and its input files into /work,
// each as a tar stream of stated size and digest that the agent checks
// before anything is in place; the job runs under the agent, its output
// streamed back at the job's caps; a timeout, an output cap or a cancel
// stops it (TERM, the kill grace, KILL); /work comes back as a bounded tar
// stream, collected by runtime/oci's rules as the local backends collect
// theirs. No request goes to the API server.

// maxSkillBytes bounds a skill's files put into a pod (its skill
// directory is a tmpfs of that size, counted in the pod's memory).
const maxSkillBytes = 256 << 20

// usesAgent says whether the pod of spec takes its job through the agent:
// with DataPathAgent, for a sandbox of one skill and no egress (the job's
// network namespace has loopback only). The others go through pods/exec,
// with the derived image of their files and the NetworkPolicy of their
// egress proxy.
func (k *Kubernetes) usesAgent(spec runtime.SandboxSpec) bool {
	return k.ko.DataPath == DataPathAgent && spec.Egress == nil && !spec.Network && spec.DepsDir == "" && !spec.UsesSkillsDir()
}

var (
	_ runtime.SkillAtClaim = (*Kubernetes)(nil)
	_ runtime.SkillBinder  = (*podSandbox)(nil)
)

// SkillAtClaim says whether a warm pod of spec takes its skill when
// claimed: the agent's pods do (their image is the interpreter's and the
// agent's, the skill's files are put at delivery), so one pool of them
// serves every skill of an image.
func (k *Kubernetes) SkillAtClaim(spec runtime.SandboxSpec) bool { return k.usesAgent(spec) }

// BindSkill gives a claimed agent's pod the skill directory its job is
// delivered with (put into the pod by Deliver).
func (s *podSandbox) BindSkill(_ context.Context, dir string) error {
	switch {
	case s.done != nil:
		return fmt.Errorf("sandbox %s has had its job already", s.spec.ID)
	case s.agentID.Name == "":
		return fmt.Errorf("sandbox %s takes its skill's files in its image, not at claim", s.spec.ID)
	case s.spec.SkillDir != "":
		return fmt.Errorf("sandbox %s has skill %s already", s.spec.ID, s.spec.SkillDir)
	}
	s.spec.SkillDir = dir
	return nil
}

// agentImage is the reference the agent's pod of job runs: its image with
// the agent's binary (BuildAgent), pushed to the registry if there is one.
func (k *Kubernetes) agentImage(ctx context.Context, job runtime.Job) (string, error) {
	if err := unsupported(job); err != nil {
		return "", err
	}
	bin, err := k.agentBinary()
	if err != nil {
		return "", err
	}
	img, err := k.artifacts.BuildAgent(job.Sandbox.Image, bin)
	if err != nil {
		return "", fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
	}
	return k.reference(ctx, job, img, k.artifacts.Blobs(img, job.Sandbox.Image))
}

// pythonWorkers is how many python workers the agent of spec keeps.
func pythonWorkers(spec runtime.SandboxSpec) int {
	if spec.Boot == runtime.BootPython {
		return 1
	}
	return 0
}

// startAgent connects to the agent of the running pod.
func (s *podSandbox) startAgent(ctx context.Context) error {
	ip, err := s.k.podIP(s.running)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, runtime.BootTimeout)
	defer cancel()
	c, err := s.k.dialAgent(ctx, s.cs, s.agentID, ip)
	if err != nil {
		return err
	}
	s.client = c
	return nil
}

// deliverAgent puts job's files into the pod and starts its run.
func (s *podSandbox) deliverAgent(ctx context.Context, job runtime.Job) error {
	s.steps.start = time.Now()
	if job.Sandbox.SkillDir != "" {
		if err := putDir(ctx, s.client, job.Sandbox.SkillDir, runtime.SkillMount, maxSkillBytes); err != nil {
			return s.agentError(job, "put the skill's files", err)
		}
	}
	if len(job.Invocation.Files) > 0 {
		now := time.Now()
		write := func(w io.Writer) error { return tarstream.WriteInputTar(w, job.Invocation.Files, now) }
		if err := putStream(ctx, s.client, runtime.WorkDir, write); err != nil {
			return s.agentError(job, "put the input files", err)
		}
	}
	s.steps.put = time.Since(s.steps.start)
	env, err := runtime.ContainerEnv(job.Invocation.Env)
	if err != nil {
		return err
	}
	req := supervisor.Request{Op: supervisor.OpRun, ID: job.Sandbox.ID, Argv: job.Invocation.Args, Env: append(env, job.Invocation.ModuleEnv...),
		Cwd: runtime.WorkDir, Stdin: job.Invocation.Stdin, Python: runtime.PythonInvocation(job.Invocation.Args)}
	s.job, s.done = job, make(chan struct{})
	go func() {
		defer close(s.done)
		s.res, s.err = s.runOnAgent(ctx, job, req)
		if s.res != nil {
			s.res.Warm = s.spec.Boot != runtime.BootCold
		}
	}()
	return nil
}

// runOnAgent runs req, stops it at its limits, and collects its outputs.
func (s *podSandbox) runOnAgent(ctx context.Context, job runtime.Job, req supervisor.Request) (*runtime.Result, error) {
	lim := job.Limits()
	caps := oci.NewCaptures(lim, job.Invocation)
	stdout, stderr, closeStreams := caps.Out, caps.Err, caps.Close
	start := time.Now()
	run, err := s.client.Start(ctx, req, caps.Stdout, caps.Stderr)
	if err != nil {
		closeStreams()
		if errors.Is(err, supervisor.ErrStart) {
			return nil, errkind.Errorf(runtime.ErrInvalidJob, "run %s: %w", job.Sandbox.ID, err)
		}
		return nil, s.agentError(job, "start the job", err)
	}
	_, exited, reason := process.AwaitEnd(ctx, run.Done(), process.Ends{
		Left: lim.Timeout - time.Since(start), StdoutOver: stdout.Over, StderrOver: stderr.Over,
	})
	if !exited {
		if err := s.client.Stop(ctx, run, reason == runtime.ReasonTimeout, s.k.opts.KillGraceOrDefault()); err != nil {
			// The agent did not answer in time (a job that floods
			// its pod, an agent gone): the pod goes, the job with it,
			// and the run ends with the reason it was stopped for.
			s.k.log.Warn("the agent did not stop the job; deleting its pod", "id", job.Sandbox.ID, "pod", s.name, "reason", reason, "error", err)
			derr := s.k.deletePod(context.WithoutCancel(ctx), s.cs, s.name)
			closeStreams()
			if derr != nil {
				return nil, s.agentError(job, "stop the job", errors.Join(err, derr))
			}
			res := &runtime.Result{Duration: time.Since(start), Summary: outcome.Summary{
				ExitCode: 128 + 9, Reason: reason, Runtime: Name, RuntimeVersion: s.version, LimitsEnforcedBy: enforcement(),
			}}
			res.Signal = process.ExitSignal(res.ExitCode)
			caps.Fill(res)
			res.OutputsSkipped = []string{fmt.Sprintf("outputs not collected: the pod's agent did not stop the job (%v), so the pod was deleted, and its workdir with it", err)}
			return res, nil
		}
	}
	duration := time.Since(start)
	closeStreams()
	collected := time.Now()
	ex := run.Exit()
	res := &runtime.Result{Duration: duration, Summary: outcome.Summary{
		ExitCode: ex.Code, Signal: ex.Signal, Reason: reason,
		Runtime: Name, RuntimeVersion: s.version, LimitsEnforcedBy: enforcement(),
	}}
	if run.Err() != nil {
		// The connection ended under the run: the pod ended (at its
		// memory limit, by the kubelet, deleted), or the agent or the
		// network between went away. The kubelet may say which.
		if r := s.k.podEnd(s.cs, s.name, sandboxEndWait).reason(); r != "" {
			res.Reason, res.ExitCode = r, 128+9
			res.Signal = process.ExitSignal(res.ExitCode)
			caps.Fill(res)
			res.OutputsSkipped = []string{fmt.Sprintf("outputs not collected: the run ended (%s) with its pod, and the pod's workdir with it", r)}
			return res, nil
		}
		return nil, s.agentError(job, "the run", run.Err())
	}
	caps.Fill(res)
	if reason == runtime.ReasonExit && (isClosed(stdout.Over) || isClosed(stderr.Over)) {
		// As the local backends say it: a job that went over an output
		// cap and ended before it was stopped is the same run.
		res.Reason = runtime.ReasonOutputCap
	}
	outs, err := s.k.outputsVia(job, func(dir string, bound int64) ([]string, bool, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), collectTimeout)
		defer cancel()
		got, err := s.client.CollectInto(cctx, runtime.WorkDir, bound, dir)
		if err != nil {
			return nil, false, err
		}
		return append(got.Notes, got.Skipped...), got.Truncated, nil
	})
	if err != nil {
		s.k.log.Warn("collecting outputs failed", "id", job.Sandbox.ID, "pod", s.name, "error", err)
		outs = &oci.Outputs{Skipped: []string{"outputs not collected: " + err.Error()}}
	}
	outs.Apply(res)
	if exited && res.Reason == runtime.ReasonExit && res.ExitCode > 128 {
		// Killed with the agent alive: by the job itself, or by the
		// node's kernel at the pod's memory limit (gVisor then kills
		// the job and lives on)? As on the exec path (run.go), the pod
		// ends, its outputs read, and the kubelet says how.
		if err := s.client.Shutdown(context.WithoutCancel(ctx)); err != nil {
			s.k.log.Debug("shut the agent down", "pod", s.name, "error", err)
		}
		if r := s.k.podEnd(s.cs, s.name, sandboxEndWait).reason(); r != "" {
			res.Reason, res.ExitCode = r, 128+9
			res.Signal = process.ExitSignal(res.ExitCode)
		}
	}
	s.k.log.Debug("agent run finished", "id", job.Sandbox.ID, "pod", s.name, "reason", res.Reason, "exit_code", res.ExitCode,
		"put", s.steps.put, "run", duration, "collect", time.Since(collected), "total", time.Since(s.steps.start))
	return res, nil
}

// agentError is the error of a run whose agent failed it at step: the
// pod's agent is gone or broke the protocol, and the run with it.
func (s *podSandbox) agentError(job runtime.Job, step string, err error) error {
	return errkind.Errorf(runtime.ErrUnavailable, "run %s: %s in pod %s/%s through its agent: %w", job.Sandbox.ID, step, s.k.namespace, s.name, err)
}

// putDir puts the tree of the host directory src into dir of the pod.
func putDir(ctx context.Context, c *supervisor.Client, src, dir string, max int64) error {
	return putStream(ctx, c, dir, func(w io.Writer) error {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		wr, err := tarstream.WriteDir(w, f, max)
		if err != nil {
			return err
		}
		if wr.Truncated {
			return fmt.Errorf("%s holds more than %d bytes (%s does not fit)", src, max, wr.Omitted)
		}
		return nil
	}, supervisor.ReadOnly())
}

// putStream puts the tar stream write writes (twice: once to measure its
// size and digest, once to send it) into dir of the pod.
func putStream(ctx context.Context, c *supervisor.Client, dir string, write func(io.Writer) error, opts ...supervisor.PutOption) error {
	size, digest, err := tarstream.Measure(write)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(write(pw)) }()
	_, err = c.Put(ctx, dir, pr, digest, size, opts...)
	pr.CloseWithError(io.ErrClosedPipe)
	return err
}
