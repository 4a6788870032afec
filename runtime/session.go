package runtime

import (
	"context"
	"syscall"
	"time"
)

// A session sandbox (policy isolation = "session") is the other shape a
// sandbox takes: booted once for a session and an image, it holds that
// session's /work and active skills and takes many runs, one foreground
// run at a time and background runs beside it, until the session closes.
// Its first process is skillbox's supervisor (the skillbox binary itself,
// mounted read-only), which starts every run as its own child: processes
// started any other way would not survive a checkpoint, and the
// supervisor is what kills a finished run's leftovers, keeps an
// interpreter pre-started for the next run and reports how each run
// ended. Nothing of a session sandbox is shared with another session.

// BootSession: Start boots skillbox's supervisor (SupervisorPath) as the
// sandbox's first process; runs are delivered to it (SessionSandbox).
const BootSession BootMode = "session"

// Paths inside a session sandbox. Everything skillbox adds lives under
// SkillsMount, which every image has as a mount point: the session's
// skills dir (each active skill at SkillTarget(name)), the dependency
// layers and the supervisor.
const (
	SessionLayersMount = SkillsMount + "/.layers"
	SupervisorDir      = SkillsMount + "/.bin"
	SupervisorPath     = SupervisorDir + "/skillbox"
	// SessionStateDir holds what skillbox keeps in /work: the logs of
	// background runs (SessionRunsDir). It is never an output.
	SessionStateDir = WorkDir + "/.skillbox"
	SessionRunsDir  = SessionStateDir + "/runs"
)

// SessionMounts are the host sources of a session sandbox's own mounts.
type SessionMounts struct {
	// SkillsDir is the host dir on SkillsMount (read-only inside). Its
	// owner fills it while the sandbox lives: a tree per active skill
	// (hard links to its pinned copy), run_code programs under
	// ProgramDir; it must hold the mount points .layers and .bin
	// (MakeSessionSkillsDir).
	SkillsDir string
	// Layers is the host dir of dependency layers (read-only at
	// SessionLayersMount); "" for none.
	Layers string
	// Supervisor is the host path of the skillbox binary run as the
	// sandbox's first process (read-only at SupervisorPath).
	Supervisor string
}

// BackgroundRun is a run of a session sandbox that outlives its call.
type BackgroundRun struct {
	ID      string    `json:"run_id"`
	PID     int       `json:"pid,omitempty"` // inside the sandbox
	Started time.Time `json:"started"`
	// Log is the run's stdout and stderr, SessionRunsDir/<id>.log inside;
	// LogHost is the same file on the host.
	Log     string `json:"log"`
	LogHost string `json:"-"`
	Running bool   `json:"running"`
	// ExitCode and Signal once it ended (as a shell reports them).
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
}

// SessionSandbox is one booted session sandbox. Destroy must be called
// whatever happened; it is safe to call twice.
type SessionSandbox interface {
	ID() string
	// Run delivers a foreground run and waits for it, under the run's
	// limits (timeout, output caps and ctx as on the cold path; memory and
	// pids are the sandbox's). Its outputs are the files of /work it
	// created or changed; what it left running is killed when it ends.
	// Foreground runs of one sandbox are delivered one at a time.
	Run(ctx context.Context, runID string, inv Invocation) (*Result, error)
	// Background starts a run that outlives the call; its stdout and
	// stderr go to its log. Its end is reported to the spec's
	// OnBackgroundExit.
	Background(ctx context.Context, runID string, inv Invocation) (BackgroundRun, error)
	// Signal sends sig to a background run's processes.
	Signal(ctx context.Context, runID string, sig syscall.Signal) error
	// Runs lists the background runs, live and recently ended.
	Runs(ctx context.Context) ([]BackgroundRun, error)
	// Workdir is the host side of /work.
	Workdir() string
	// Done is closed once the sandbox is gone (destroyed, or its
	// supervisor died).
	Done() <-chan struct{}
	Destroy(ctx context.Context) error
}

// SessionBackend is a backend that can keep a sandbox for a session: an
// optional ability of a Lifecycle backend (runsc has it).
type SessionBackend interface {
	CreateSession(ctx context.Context, spec SandboxSpec) (SessionSandbox, error)
}

// SandboxIdentity is what a checkpoint of a session sandbox must match to
// be restored: the runtime build and platform that made its memory image,
// its network mode, and the digest of its spec without what may differ
// at a restore (mount sources, run-dir paths, resources), which covers
// the supervisor binary's contents too.
type SandboxIdentity struct {
	RuntimeVersion string
	Platform       string
	Network        string
	SpecDigest     string
}

// Checkpointer is a session sandbox that can be checkpointed (runsc): its
// memory and processes go to imageDir, a copy of its /work to workDir.
// Without leaveRunning the sandbox is gone afterwards (destroyed); with
// it, it runs on (a fork of a live session). No foreground run may be
// under way; background runs are frozen into the image. A budget (nil: no
// bound) is charged before anything is written: /work is walked first and
// what a copy would take is reserved, so a checkpoint that cannot fit is
// refused with the sandbox left as it was; then the image as runsc wrote
// it, and every write of the copy as it goes, so one that grows past the
// budget while it is copied stops there.
type Checkpointer interface {
	Identity(ctx context.Context) (SandboxIdentity, error)
	Checkpoint(ctx context.Context, imageDir, workDir string, leaveRunning bool, budget CheckpointBudget) error
}

// CheckpointBudget is what a checkpoint is charged to while it is made
// (a runtime/checkpoint Pending). Its errors say which budget would be
// passed and what to do.
type CheckpointBudget interface {
	// Reserve sets n more bytes aside, or refuses them.
	Reserve(n int64) error
	// Charge counts n bytes about to be written, within what was
	// reserved or reserving more.
	Charge(n int64) error
}

// Freezer is a Checkpointer whose sandbox can be held still across a
// checkpoint: Freeze stops every process in it (and so every change to
// its /work) until Thaw. A pause freezes, checkpoints with leaveRunning,
// keeps the checkpoint and only then destroys the sandbox, so that a
// checkpoint that fails at any step (the image, the copy of /work, the
// store's budget) leaves the sandbox running as before after Thaw. A
// sandbox that cannot be thawed is destroyed by Thaw, with everything it
// had on the host, and Thaw says so. Freeze first reserves against budget
// (nil: no bound) what a copy of /work would take, as Checkpoint would,
// while the sandbox still runs: one that cannot fit is refused without
// being stopped at all, and the Checkpoint that follows with the same
// budget does not reserve it again.
type Freezer interface {
	Freeze(ctx context.Context, budget CheckpointBudget) error
	Thaw(ctx context.Context) error
}

// SessionRestorer is a SessionBackend that can restore a checkpoint into a
// new sandbox made from spec (the same spec the checkpointed sandbox had,
// but for its ID): /work from workDir, memory and processes from
// imageDir. bg are the background runs the checkpoint holds, which the
// restored sandbox follows on.
type SessionRestorer interface {
	// Identity is what a sandbox of spec would be (for checking a
	// checkpoint before restoring it).
	SessionIdentity(ctx context.Context, spec SandboxSpec) (SandboxIdentity, error)
	RestoreSession(ctx context.Context, spec SandboxSpec, imageDir, workDir string, bg []BackgroundRun) (SessionSandbox, error)
}
