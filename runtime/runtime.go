// Package runtime is the API between skillbox and the sandboxes that run its
// jobs: a Job and its Limits (the one limits type, which policy and the
// service use too), the Result of a run, the Runtime interface a backend
// implements (one call wide: Run) and the Lifecycle of single-use sandboxes
// under it (Create, Start, Deliver, Wait, Destroy) that the warm Pool uses;
// what a valid job is (ValidateJob, the environment and input rules, module
// paths); and the registry of backends. Backends register themselves by name
// from their own packages (runtime/ocicli: runsc, runc; runtime/containerd;
// runtime/kubernetes); callers import the ones they offer and pick one with
// New, which never falls back to another. A backend owns and decodes its own
// options: a typed value (Options.Backend) or its config block's attributes
// (Options.Settings).
//
// The parts backends share live beside it, not in it: runtime/oci builds a
// job's OCI bundle and reads its outputs back, runtime/process holds the
// host side of a sandbox (streams, cgroup, watchdog, sweep).
package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/outcome"
)

// Sentinel errors; backends wrap them with %w so callers can classify
// failures. ErrUnavailable and ErrInvalidJob are of errkind's kinds.
var (
	// ErrUnavailable: the backend binary is missing or unusable on this host.
	ErrUnavailable = errkind.New(errkind.Unavailable, "runtime unavailable")
	// ErrInvalidJob: the job itself is malformed (bad env name, bad path, ...).
	ErrInvalidJob = errkind.New(errkind.InvalidParams, "invalid job")
	// ErrUnknownRuntime: no backend is registered under that name.
	ErrUnknownRuntime = errors.New("unknown runtime")
)

// Reason says why a run ended; it is declared with the run's summary
// (runtime/outcome), which the wire's types share.
type Reason = outcome.Reason

// Why a run ended (outcome's Reasons).
const (
	ReasonExit      = outcome.ReasonExit
	ReasonTimeout   = outcome.ReasonTimeout
	ReasonOOM       = outcome.ReasonOOM
	ReasonPids      = outcome.ReasonPids
	ReasonOutputCap = outcome.ReasonOutputCap
	ReasonCancelled = outcome.ReasonCancelled
	ReasonKilled    = outcome.ReasonKilled
	ReasonEgressCap = outcome.ReasonEgressCap
)

// Paths inside every container.
const (
	SkillMount = "/skill" // the skill directory, read-only
	WorkDir    = "/work"  // writable size-capped tmpfs, the cwd
	// OutputsDir is made empty in every workdir: a convention for scripts,
	// not a limit (every file changed anywhere in WorkDir is an output).
	OutputsDir = "/work/outputs"
	// HomeDir is $HOME: writable (the /tmp tmpfs) and outside WorkDir, so
	// the profiles and caches tools keep there never come back as outputs.
	HomeDir      = "/tmp"
	ContainerUID = 65534 // scripts run as nobody
	ContainerGID = 65534
)

// Limits bound one run. Zero values mean "use DefaultLimits". LimitFields
// describes every field (its HCL and JSON keys, kind and default); a field
// added here must be added there. Memory, pids, CPUs and the tmpfs sizes
// are the sandbox's (see SandboxLimits), the rest each job's.
type Limits struct {
	Timeout      time.Duration
	MemoryBytes  int64
	Pids         int64
	CPUs         float64
	WorkdirBytes int64 // tmpfs size of /work
	TmpBytes     int64 // tmpfs size of /tmp
	StdoutBytes  int64 // cap per stream
	StderrBytes  int64
	OutputBytes  int64 // total bytes of collected outputs
	OutputFiles  int   // max number of collected outputs
	// OutputFileBytes caps one output file; a bigger one is left out.
	OutputFileBytes int64
	// EgressConnections and EgressBytesOut cap a run's connections through
	// the egress proxy and the bytes it sends over them (runs with Egress).
	EgressConnections int
	EgressBytesOut    int64
}

// InputKind says what an InputFile entry makes in the workdir.
type InputKind string

const (
	// InputRegular is a regular file holding Data; "" means the same.
	InputRegular InputKind = "file"
	// InputDir is a directory (an empty one too); Data must be empty.
	InputDir InputKind = "dir"
	// InputSymlink is a symbolic link whose target, Target, is kept
	// verbatim; it is never followed on the host, and no other entry may
	// lie under it.
	InputSymlink InputKind = "symlink"
)

// InputFile is one entry the caller passes into the run's workdir: a file,
// a directory or a symlink at a relative path such as
// "unpacked/ppt/presentation.xml". Directories a path needs are made
// (0755) whether or not they are given as entries. ValidateInputName and
// ValidateJob say which names are allowed.
type InputFile struct {
	Name   string    // relative, "/"-separated path under /work
	Kind   InputKind // "" is InputRegular
	Data   []byte    // InputRegular only
	Mode   uint32    // permission bits; 0 means 0644 (file) or 0755 (dir); ignored for links
	Target string    // InputSymlink only
}

// ImageRef names an interpreter image: in results and audit records, and
// for a backend that keeps images itself (containerd runs a job from a
// snapshot of the image rather than from RootFS).
type ImageRef struct {
	Name   string `json:"name"`
	Digest string `json:"digest"` // the manifest digest
	// Ref is the registry reference an image from a registry is pulled
	// from (only the containerd backend runs those); "" for an image
	// skillbox built.
	Ref string `json:"ref,omitempty"`
	// Layout is the OCI image layout a built image can be imported from
	// (skillbox's image store).
	Layout string `json:"-"`
}

// IsZero reports whether r names no image.
func (r ImageRef) IsZero() bool { return r == ImageRef{} }

// Job is everything a backend needs to run one script once: the sandbox it
// runs in and the invocation it runs there. A cold run makes the sandbox
// for the job; a warm one delivers the invocation into a sandbox made
// before it arrived (Lifecycle).
type Job struct {
	Sandbox    SandboxSpec
	Invocation Invocation
}

// Limits are the limits the job runs under: the invocation's timeout and
// output caps, the sandbox's memory, pids, CPUs and tmpfs sizes, and the
// defaults for what neither sets.
func (j Job) Limits() Limits {
	return j.Invocation.Limits.WithDefaults().WithSandbox(j.Sandbox.Limits.Sandbox())
}

// StreamSink receives live output; Write must not block for long.
type StreamSink interface {
	Write(p []byte) (int, error)
}

// OutputFile is a regular file the script created or changed under /work.
type OutputFile struct {
	Path   string `json:"path"` // relative to /work, e.g. "outputs/report.pdf"
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Data   []byte `json:"-"`
}

// Result is what a run produced. A non-nil error from Run means the sandbox
// itself could not be set up or torn down; a script failing is a Result.
// Its Summary (exit, signal, reason, the caps hit, what the script deleted,
// the runtime and what held each limit) is the part every result of the
// run carries on; the streams, files and timing are the sandbox's own
// forms of them. A backend sets LimitsEnforcedBy from the EnforcedBy
// constants (see Enforcement) and OutputsTruncatedBy to a Cap constant.
type Result struct {
	outcome.Summary
	Stdout   []byte        `json:"-"`
	Stderr   []byte        `json:"-"`
	Duration time.Duration `json:"-"`
	Outputs  []OutputFile  `json:"outputs,omitempty"`
	// Egress sums up the run's connections through the egress proxy; nil
	// for runs without egress.
	Egress *egress.Stats `json:"egress,omitempty"`
}

// Runtime runs jobs. Implementations must remove every container, bundle and
// mount they made before Run returns, whatever happened, including when ctx is
// cancelled (then the Result has Reason killed).
type Runtime interface {
	Name() string
	// Version reports the backend's version, or ErrUnavailable with a hint.
	Version(ctx context.Context) (string, error)
	Run(ctx context.Context, job Job) (*Result, error)
}

// Options are what New hands a backend: what every backend takes, and the
// backend's own options, which the backend owns and decodes (BackendOptions).
type Options struct {
	RunDir string // where bundles and workdirs are made; default DefaultRunDir
	Logger Logger // an hclog.Logger is Named per backend; nil logs nothing

	// NetNS is the path of a prepared network namespace (e.g. made by CNI or
	// `ip netns add`) that jobs with Network join. Without it such jobs are
	// refused with ErrUnavailable rather than silently given no network.
	NetNS string
	// KillGrace is how long a timed-out script has between SIGTERM and
	// SIGKILL; 0 means one second.
	KillGrace time.Duration
	// Rootless runs sandboxes as the ordinary user this process is outside
	// its user namespace (runtime/rootless): only runsc can, the other
	// backends refuse it. RunDir and the backend's state dir must then be
	// the user's.
	Rootless bool
	// Delegated, with Rootless, is the user's delegated cgroup v2 subtree
	// (runtime/rootless.DelegatedCgroup): each run gets a cgroup under it
	// with its limits, which runsc joins. Nil: the runs have no cgroup.
	Delegated *DelegatedCgroup

	// Settings are the attributes of the backend's runtime "NAME" {} block
	// of the config file (policy.Config.RuntimeOptions), which the backend
	// decodes into its own options.
	Settings Settings
	// Backend, for Go callers, is the backend's own options as the type it
	// declares (ocicli.RunscOptions, ocicli.RuncOptions,
	// containerd.Options); it excludes Settings. Neither means the
	// backend's defaults.
	Backend any
}

// DelegatedCgroup is a cgroup v2 subtree an ordinary user may manage, with
// the memory and pids controllers (and, when CPU, cpu) enabled for its
// children.
type DelegatedCgroup struct {
	Path string // relative to the hierarchy's root
	CPU  bool
}

// Settings are a runtime block's attributes by their names in the config
// file (binary, state_dir, flags, ...): a string, or []string for a list.
// Policy checks them against the file's format; a backend takes the ones
// it has.
type Settings map[string]any

// BackendOptions gives backend name its own options of type T from o:
// o.Backend when it is a T (or *T), else o.Settings decoded by decode, else
// T's zero value (the backend's defaults).
func BackendOptions[T any](name string, o Options, decode func(Settings) (T, error)) (T, error) {
	var zero T
	switch b := o.Backend.(type) {
	case nil:
	case T:
		if len(o.Settings) > 0 {
			return zero, fmt.Errorf("runtime %s: both settings and options given", name)
		}
		return b, nil
	case *T:
		if len(o.Settings) > 0 {
			return zero, fmt.Errorf("runtime %s: both settings and options given", name)
		}
		return *b, nil
	default:
		return zero, fmt.Errorf("runtime %s: options of type %T, want %T", name, o.Backend, zero)
	}
	if len(o.Settings) == 0 {
		return zero, nil
	}
	t, err := decode(o.Settings)
	if err != nil {
		return zero, fmt.Errorf("runtime %s: %w", name, err)
	}
	return t, nil
}

// Decode sets the options a backend has from s: each field of fields by
// its attribute name, a *string or a *[]string. An attribute the backend
// does not have, or of the wrong kind, is an error.
func (s Settings) Decode(fields map[string]any) error {
	for name, v := range s {
		switch dst := fields[name].(type) {
		case *string:
			str, ok := v.(string)
			if !ok {
				return fmt.Errorf("setting %s is %T, want a string", name, v)
			}
			*dst = str
		case *[]string:
			strs, ok := v.([]string)
			if !ok {
				return fmt.Errorf("setting %s is %T, want a list of strings", name, v)
			}
			*dst = append([]string(nil), strs...)
		default:
			return fmt.Errorf("no setting %s", name)
		}
	}
	return nil
}

// String is the string setting name ("" when it is not set).
func (s Settings) String(name string) string {
	v, _ := s[name].(string)
	return v
}

// The runtime handlers of the containerd backend: gVisor's shim, or
// containerd's runc v2 shim running its binary (runc, or runsc). They are
// here, not in runtime/containerd, because the config file names them.
const (
	ContainerdHandlerRunsc  = "io.containerd.runsc.v1"
	ContainerdHandlerRuncV2 = "io.containerd.runc.v2"
)

// ContainerdHandlers lists them.
var ContainerdHandlers = []string{ContainerdHandlerRunsc, ContainerdHandlerRuncV2}

// Logger is the subset of hclog.Logger the backends use.
type Logger interface {
	Debug(msg string, args ...interface{})
	Info(msg string, args ...interface{})
	Warn(msg string, args ...interface{})
	Error(msg string, args ...interface{})
}

// Factory makes a backend from options.
type Factory func(Options) (Runtime, error)

var factories = map[string]Factory{}

// Register adds a backend; called from init in each backend's file.
func Register(name string, f Factory) { factories[name] = f }

// Names lists the registered backends, sorted.
func Names() []string {
	var out []string
	for n := range factories {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New makes the named backend. It never substitutes another one.
func New(name string, opts Options) (Runtime, error) {
	f, ok := factories[name]
	if !ok {
		return nil, fmt.Errorf("%w %q: choose one of %v", ErrUnknownRuntime, name, Names())
	}
	return f(opts)
}

// Caps an output can hit; Result.OutputsTruncatedBy names one of them.
const (
	CapOutputFiles     = "output_files"      // Limits.OutputFiles
	CapOutputBytes     = "output_bytes"      // Limits.OutputBytes, all outputs together
	CapOutputFileBytes = "output_file_bytes" // Limits.OutputFileBytes, one output
)

// IDPrefix starts the ids of the runs the daemon makes; Sweep only touches
// containers whose id has it.
const IDPrefix = "skillbox-"

// Default directories.
const (
	DefaultStateBase = "/run/skillbox"
	DefaultRunDir    = "/run/skillbox/runs"
)

// Sweeper is implemented by backends that can clean up after a crash.
type Sweeper interface {
	Sweep(ctx context.Context) error
}

// Sweep removes what runs of rt left behind when the process driving them
// died (daemon crash, kill -9, power loss of /run is moot), and nothing else.
// The backend's RunDir is the record: a run locks its run dir before anything
// of the run exists and removes it last (after its container and cgroup), so
//
//   - a run dir whose lock is held belongs to a run in progress, in this
//     process or another (`skillbox run` next to the daemon), however young,
//     and is left alone with its container and cgroup;
//   - a run dir whose lock is free is a dead run's: Sweep removes its
//     container (from the backend's state dir), the processes still in its
//     cgroup, the cgroup, the workdir mount and the dir;
//   - a container in the backend's state dir with IDPrefix whose bundle is
//     RunDir/<id> but whose run dir is gone is a leftover of a run whose
//     teardown failed to delete it (teardown deletes the container before it
//     removes the run dir): Sweep deletes it, then its cgroup if no process
//     is left in it.
//
// Cgroups under CgroupParent are shared by every RunDir and state dir on the
// host (test runs, a second daemon), so Sweep only removes one whose id it
// attributed as above; an empty cgroup it cannot attribute stays, which is
// harmless, where removing another instance's would not be. The daemon calls
// Sweep once at start. Backends that keep no local state (none yet) need not
// implement Sweeper.
func Sweep(ctx context.Context, rt Runtime) error {
	s, ok := rt.(Sweeper)
	if !ok {
		return nil
	}
	return s.Sweep(ctx)
}

// KillGrace is o.KillGrace or the default grace between TERM and KILL.
func (o Options) KillGraceOrDefault() time.Duration {
	if o.KillGrace > 0 {
		return o.KillGrace
	}
	return DefaultKillGrace
}

// DefaultKillGrace is the grace between TERM and KILL when none is set.
const DefaultKillGrace = time.Second

// NamedLogger returns an hclog logger named name from opts, or a null logger.
func NamedLogger(l Logger, name string) Logger {
	switch lg := l.(type) {
	case nil:
		return hclog.NewNullLogger()
	case hclog.Logger:
		return lg.Named(name)
	default:
		return l
	}
}
