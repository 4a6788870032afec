package runtime

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/span"
)

// The lifecycle splits a run in two: the sandbox (image, skill, limits,
// network), which is known before any job arrives, and the invocation
// (argv, env, stdin, files, timeout), which is known only when it does.
// Every backend goes through the same steps,
//
//	Create → Start → Deliver → Wait → Destroy
//
// a cold run without pausing between them, a warm pool with a pause after
// Start (the sandbox is booted and waits for its one job). A sandbox runs
// exactly one invocation and is destroyed. This is the seam a containerd or
// Kubernetes backend implements too: nothing in it names a CLI.

// BootMode says how a sandbox gets its job.
type BootMode string

const (
	// BootCold: the job is the sandbox's first process; Start does
	// nothing and Deliver boots the sandbox with it.
	BootCold BootMode = "cold"
	// BootPython: Start boots python3 running skillbox's supervisor,
	// which imports common modules and waits for one job on its stdin;
	// Deliver hands it argv, env and stdin, and the supervisor runs the
	// script as __main__ in that interpreter. Only for invocations whose
	// argv is python3 SCRIPT ARGS... (PythonInvocation).
	BootPython BootMode = "python"
	// BootExec: Start boots a holder process that waits; Deliver execs the
	// job into the running sandbox.
	BootExec BootMode = "exec"
)

// SandboxSpec is what a sandbox is made of, known before a job arrives.
type SandboxSpec struct {
	ID     string // unique, [a-zA-Z0-9_-]; also the container id
	RootFS string // host path of the unpacked image rootfs (mounted read-only); "" only for an Image.Ref
	// Image is the image RootFS was unpacked from, when known; the
	// containerd backend runs from a snapshot of it.
	Image    ImageRef
	SkillDir string // host path of the skill directory (mounted read-only at SkillMount); "" for none
	// DepsDir, when set, is the host directory of the run's dependency
	// layer, mounted read-only at DepsMount (see WithDepsPath).
	DepsDir string
	// Limits of the sandbox as a whole: memory, pids, CPUs and the tmpfs
	// sizes are fixed at Create, and so are the egress caps of a sandbox
	// with Egress (EgressConfig); an invocation's other limits (timeout,
	// output caps) are its own (Job.Limits).
	Limits  Limits
	Network bool // false: no network at all (the default)
	// Egress, when set, gives the sandbox a network namespace of its own
	// whose only way out is skillbox's proxy (see package egress); it
	// excludes Network.
	Egress *egress.Config
	// Skills are more skill directories, each mounted read-only at its
	// Target under SkillsMount (skills.run_code), and Program is the code
	// run_code runs, read-only in ProgramDir; pooled sandboxes have none.
	Skills  []SkillBind
	Program *Program
	Boot    BootMode
	// Session is what a BootSession sandbox mounts (see SessionMounts);
	// OnBackgroundExit, when set, learns of each background run's end.
	Session          *SessionMounts
	OnBackgroundExit func(BackgroundRun)
	// Background boots the sandbox at a low CPU weight (a pool refill),
	// so that runs under way keep the CPU; its job gets the normal weight.
	Background bool
}

// EgressConfig is the sandbox's Egress with the caps of its limits: the
// egress proxy starts with the sandbox, so its caps are the sandbox's.
func (s SandboxSpec) EgressConfig() egress.Config {
	cfg := *s.Egress
	lim := s.Limits.WithDefaults()
	cfg.MaxConnections, cfg.MaxBytesOut = lim.EgressConnections, lim.EgressBytesOut
	return cfg
}

// ProcessJob is the job of a process the sandbox runs of its own, under
// its limits: its first process before any job arrives (a holder, the
// supervisor), or a placeholder for the job to come when the sandbox's
// part of a job is checked or its OCI spec built.
func (s SandboxSpec) ProcessJob(argv ...string) Job {
	return Job{Sandbox: s, Invocation: Invocation{Args: argv, Limits: s.Limits}}
}

// Invocation is one job for a sandbox, known when it arrives.
type Invocation struct {
	// Args is the argv inside the sandbox, e.g. ["python3",
	// "/skill/scripts/x.py", "a"].
	Args []string
	// Env is KEY=VALUE, already allowlisted by the caller (ContainerEnv
	// adds PATH/HOME/LANG).
	Env []string
	// ModuleEnv is set by the service, never from a caller's env: the
	// interpreter's module path from ModulePathEnv (PYTHONPATH, NODE_PATH).
	ModuleEnv []string
	Stdin     []byte
	Files     []InputFile
	// Limits: Timeout and the output caps apply to this job; the memory,
	// pids, CPUs and tmpfs sizes it sets must be the sandbox's (Fits).
	Limits Limits
	// Stdout and Stderr, when set, also receive the streams live (after
	// capping).
	Stdout, Stderr StreamSink
}

// Sandbox is one single-use sandbox of a backend. Destroy must be called
// whatever happened (it is safe to call twice); after Wait the sandbox is
// spent.
type Sandbox interface {
	ID() string
	// Start boots the sandbox so that it waits for its job (a no-op for
	// BootCold).
	Start(ctx context.Context) error
	// Deliver writes the invocation's files into the workdir and starts it.
	Deliver(ctx context.Context, inv Invocation) error
	// Wait waits for the job to end (its timeout, output caps and ctx stop
	// it, as on the cold path) and collects its result and outputs.
	Wait(ctx context.Context) (*Result, error)
	// Destroy removes the container, its processes, cgroup, mounts and
	// run dir, with a context of its own if ctx is done.
	Destroy(ctx context.Context) error
}

// Lifecycle is a backend whose runs go through Sandbox steps. Close
// destroys every sandbox it made that is still there.
type Lifecycle interface {
	Runtime
	Create(ctx context.Context, spec SandboxSpec) (Sandbox, error)
	Close(ctx context.Context) error
}

// Fits reports whether an invocation with limits inv may run in a sandbox
// made with limits sb: each sandbox-wide limit inv sets must be exactly
// the sandbox's (a job never gets looser limits than it asked for, and a
// stricter one needs a sandbox of its own); one it leaves zero is the
// sandbox's.
func Fits(sb, inv Limits) bool {
	asked := sb
	for _, f := range LimitFields {
		if f.Sandbox && f.IsSet(&inv) {
			f.Copy(&asked, &inv)
		}
	}
	return asked.Sandbox() == sb.Sandbox()
}

// PythonInvocation reports whether argv runs a python script the
// supervisor of BootPython can run: python3 (or python) then an absolute
// script path, then the script's arguments; no interpreter options.
func PythonInvocation(argv []string) bool {
	return len(argv) >= 2 && (argv[0] == "python3" || argv[0] == "python") &&
		len(argv[1]) > 1 && argv[1][0] == '/'
}

// RunLifecycle runs job on lc through the whole lifecycle without pausing:
// the cold path every backend shares.
func RunLifecycle(ctx context.Context, lc Lifecycle, job Job) (res *Result, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("run %s not started: %w", job.Sandbox.ID, err)
	}
	bctx, sp := span.Start(ctx, "sandbox.boot", span.AttrRuntime.String(lc.Name()))
	spec := job.Sandbox
	spec.Boot = BootCold
	sb, err := lc.Create(bctx, spec)
	if err != nil {
		span.End(sp, err, "")
		return nil, err
	}
	defer func() {
		p := recover()
		if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil && err == nil && p == nil {
			res, err = nil, fmt.Errorf("teardown of run %s: %w", job.Sandbox.ID, derr)
		}
		if p != nil {
			panic(p)
		}
	}()
	err = sb.Start(bctx)
	span.End(sp, err, "")
	if err != nil {
		return nil, err
	}
	return DeliverAndWait(ctx, sb, job.Invocation)
}

// DeliverAndWait delivers inv into the started sandbox sb and waits for
// its result, each step in a span of its own ("sandbox.deliver": the
// inputs; "sandbox.wait": the script and the collection of its outputs).
func DeliverAndWait(ctx context.Context, sb Sandbox, inv Invocation) (*Result, error) {
	dctx, sp := span.Start(ctx, "sandbox.deliver")
	err := sb.Deliver(dctx, inv)
	span.End(sp, err, "")
	if err != nil {
		return nil, err
	}
	wctx, sp := span.Start(ctx, "sandbox.wait")
	res, err := sb.Wait(wctx)
	if res != nil && sp.IsRecording() {
		sp.SetAttributes(span.AttrReason.String(string(res.Reason)), span.AttrExitCode.Int(res.ExitCode))
	}
	span.End(sp, err, "")
	return res, err
}

// LifecycleBoots are the boot modes of Lifecycle.Create; a session
// sandbox has BootSession (SessionBackend).
var LifecycleBoots = []BootMode{BootCold, BootPython, BootExec}

// CheckSpec is the first step of every backend's Create, as Accept is of
// its Deliver: spec boots in one of boots, ctx is not done, and the
// sandbox's part of a job is valid (a placeholder argv standing for the
// job to come). It returns spec with DefaultLimits for the limits it
// leaves zero.
func CheckSpec(ctx context.Context, spec SandboxSpec, boots ...BootMode) (SandboxSpec, error) {
	if !slices.Contains(boots, spec.Boot) {
		return spec, errkind.Errorf(ErrInvalidJob, "unknown boot mode %q", spec.Boot)
	}
	if err := ctx.Err(); err != nil {
		return spec, fmt.Errorf("sandbox %s not created: %w", spec.ID, err)
	}
	spec.Limits = spec.Limits.WithDefaults()
	if err := ValidateJob(spec.ProcessJob("true")); err != nil {
		return spec, err
	}
	return spec, nil
}

// Accept checks that inv may be delivered into a sandbox made from spec,
// the first step of every backend's Deliver: its sandbox-wide limits are
// the sandbox's, a python-booted sandbox gets a python script, the job
// they make together is valid, and ctx is not done. It returns that job.
func Accept(ctx context.Context, spec SandboxSpec, inv Invocation) (Job, error) {
	if !Fits(spec.Limits, inv.Limits) {
		return Job{}, errkind.Errorf(ErrInvalidJob, "the job's memory, pids, cpus or tmpfs limits differ from sandbox %s's", spec.ID)
	}
	if spec.Boot == BootPython && !PythonInvocation(inv.Args) {
		return Job{}, errkind.Errorf(ErrInvalidJob, "sandbox %s runs python scripts only, not %q", spec.ID, inv.Args[0])
	}
	job := Job{Sandbox: spec, Invocation: inv}
	if err := ValidateJob(job); err != nil {
		return Job{}, err
	}
	if err := ctx.Err(); err != nil {
		return Job{}, fmt.Errorf("run %s not started: %w", spec.ID, err)
	}
	return job, nil
}

// BootTimeout bounds how long Start waits for a sandbox to be ready.
const BootTimeout = 60 * time.Second
