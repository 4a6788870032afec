package ocicli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/process"
)

// Runsc runs jobs in gVisor through the runsc CLI: every script talks to
// gVisor's user-space kernel (the sentry) rather than the host's, with the
// network off (--network=none) unless the job asks for it.
//
// Two things differ from runc and are handled here:
//
//   - Memory and pids cgroups are created by us before runsc starts. runsc
//     joins a cgroup that already exists without touching its limits or
//     deleting it afterwards, so its OOM and pids counters survive the end of
//     `runsc run` (which deletes the container) and can be read.
//   - The host pids limit is scaled. With the ptrace platform every guest
//     process costs several host tasks (a stub process and its threads) and
//     the sentry has its own threads, so the job's Pids would stop a script
//     after a dozen forks. This gVisor has no pids limit of its own; a fork
//     bomb runs into the scaled host limit, the sentry cannot make a thread
//     and the whole sandbox dies, which pids.events records (reason pids).
type Runsc struct {
	cliBackend
	opts runtime.Options
	ro   RunscOptions
}

var (
	_ runtime.Runtime   = (*Runsc)(nil)
	_ runtime.Lifecycle = (*Runsc)(nil)
)

func init() {
	runtime.Register("runsc", func(o runtime.Options) (runtime.Runtime, error) { return NewRunsc(o) })
}

// RunscOptions are the runsc backend's own options (runtime.Options.Backend;
// from the config file, its runtime "runsc" {} block).
type RunscOptions struct {
	Binary   string   // path or name of runsc; default the pinned build (PinnedRunscPath)
	StateDir string   // its --root; default RunscStateDir(Binary)
	Platform string   // its --platform; the pinned build's default is systrap, another's "" keeps its own
	Flags    []string // extra global flags, passed before the subcommand
}

// DecodeRunscOptions takes RunscOptions from a runtime "runsc" block's
// settings: binary, state_dir, platform and flags.
func DecodeRunscOptions(s runtime.Settings) (RunscOptions, error) {
	var o RunscOptions
	err := s.Decode(map[string]any{"binary": &o.Binary, "state_dir": &o.StateDir, "platform": &o.Platform, "flags": &o.Flags})
	return o, err
}

// NewRunsc makes the gVisor backend. A missing runsc binary is reported by
// Version and Run (ErrUnavailable), not here, so a daemon can start and say
// what to install.
//
// Without a Binary it is the pinned build (PinnedRunscPath) on the systrap
// platform, with a state dir of its version's own (RunscStateDir).
func NewRunsc(opts runtime.Options) (*Runsc, error) {
	ro, err := runtime.BackendOptions("runsc", opts, DecodeRunscOptions)
	if err != nil {
		return nil, err
	}
	if ro.Binary == "" {
		ro.Binary = runtime.PinnedRunscPath()
	}
	if ro.Platform == "" && runtime.IsPinnedRunsc(ro.Binary) {
		ro.Platform = runtime.PinnedRunscPlatform
	}
	if ro.StateDir == "" {
		ro.StateDir = runtime.RunscStateDir(ro.Binary)
	}
	opts = withDefaults(opts)
	global := []string{}
	if ro.Platform != "" {
		global = append(global, "--platform="+ro.Platform)
	}
	if opts.Rootless {
		// No cgroup to make unless the user has a delegated subtree:
		// runsc would log that it cannot and go on without limits;
		// skillbox enforces them another way (see enforcement) and says
		// which.
		global = append(global, "--rootless")
		if opts.Delegated == nil {
			global = append(global, "--ignore-cgroups")
		}
	}
	global = append(global, ro.Flags...)
	r := &Runsc{opts: opts, ro: ro}
	r.cli = &ociCLI{
		name:    "runsc",
		binary:  ro.Binary,
		root:    ro.StateDir,
		global:  global,
		install: runtime.RunscInstallHint(ro.Binary),
	}
	r.eng = &engine{
		name:     "runsc",
		cli:      r.cli,
		runDir:   opts.RunDir,
		log:      runtime.NamedLogger(opts.Logger, "runtime.runsc"),
		grace:    opts.KillGraceOrDefault(),
		d:        r,
		rootless: opts.Rootless,
		cgParent: oci.CgroupParent,
		platform: ro.Platform,
	}
	if opts.Rootless && opts.Delegated != nil {
		r.eng.cgParent, r.eng.delegated = opts.Delegated.Path, true
	}
	return r, nil
}

// withDefaults fills the run dir default.
func withDefaults(o runtime.Options) runtime.Options {
	if o.RunDir == "" {
		o.RunDir = runtime.DefaultRunDir
	}
	return o
}

// binaryOr and stateDirOr are the binary and state dir defaults of the CLI
// backend name.
func binaryOr(bin, name string) string {
	if bin == "" {
		return name
	}
	return bin
}

func stateDirOr(dir, name string) string {
	if dir == "" {
		return filepath.Join(runtime.DefaultStateBase, name)
	}
	return dir
}

func (r *Runsc) Name() string { return "runsc" }

// Run runs job in a fresh gVisor sandbox and removes it.
func (r *Runsc) Run(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
	return runtime.RunLifecycle(ctx, r, job)
}

func (r *Runsc) specOptions(job runtime.Job) oci.SpecOptions {
	if r.opts.Rootless {
		o := oci.SpecOptions{Rootless: true}
		if r.eng.delegated {
			o.CgroupsPath = r.eng.cgParent + "/" + job.Sandbox.ID
		}
		return o
	}
	return process.RunscSpecOptions(r.opts.NetNS)
}

// enforcement is what holds the sandbox limits: with root, the run's
// cgroup (memory, pids; the CPU quota runsc applies to the cgroups it
// makes) and skillbox's tmpfs for /work; rootless, no cgroup: skillbox
// watches the sentry's memory (memoryWatch), the sentry's RLIMIT_NPROC
// bounds the tasks, and nothing holds a CPU quota.
func (r *Runsc) enforcement() map[string]string {
	if d := r.opts.Delegated; r.opts.Rootless && d != nil {
		cpu := runtime.EnforcedByNone
		if d.CPU {
			cpu = runtime.EnforcedByCgroup
		}
		return runtime.Enforcement(map[string]string{
			"memory": runtime.EnforcedByCgroup, "pids": runtime.EnforcedByCgroup, "cpus": cpu,
			"workdir": runtime.EnforcedByTmpfs, "tmp": runtime.EnforcedByGVisor,
		})
	}
	if r.opts.Rootless {
		return runtime.Enforcement(map[string]string{
			"memory": runtime.EnforcedBySkillboxPoll, "pids": runtime.EnforcedByRlimit,
			"workdir": runtime.EnforcedByTmpfs, "tmp": runtime.EnforcedByGVisor,
		})
	}
	return runtime.Enforcement(map[string]string{
		"memory": runtime.EnforcedByCgroup, "pids": runtime.EnforcedByCgroup, "cpus": runtime.EnforcedByCgroup,
		"workdir": runtime.EnforcedByTmpfs, "tmp": runtime.EnforcedByGVisor,
	})
}

func (r *Runsc) runCommand(net bool, b *oci.Bundle) ([]string, []string) {
	network := "--network=none"
	if net {
		network = "--network=sandbox"
	}
	global := []string{network, "--log=" + filepath.Join(b.Dir, runscLog), "--log-format=json"}
	return global, []string{"run", "--bundle", b.Dir, b.ID}
}

// detachedRunCommand is `run --detach`: no runsc process stays to wait for
// a pre-booted sandbox (it would cost each idle sandbox a Go process), and
// the first process reports its job's exit status on statusFD instead.
func (r *Runsc) detachedRunCommand(net bool, b *oci.Bundle, statusFD int) ([]string, []string, bool) {
	global, args := r.runCommand(net, b)
	return global, append([]string{"run", "--detach", "--pass-fd", "3:" + strconv.Itoa(statusFD)}, args[1:]...), true
}

func (r *Runsc) execCommand(b *oci.Bundle, processFile string) ([]string, []string) {
	global := []string{"--log=" + filepath.Join(b.Dir, runscLog), "--log-format=json"}
	return global, []string{"exec", "--process", processFile, b.ID}
}

const runscLog = "runsc.log"

// runsc exits 128 when it fails itself, and logs why at level error.
func (r *Runsc) setupError(b *oci.Bundle, code int) error {
	if code != 128 {
		return nil
	}
	if msg := logErrors(filepath.Join(b.Dir, runscLog)); msg != "" {
		return fmt.Errorf("runsc could not run the container: %s", msg)
	}
	return nil
}

func (r *Runsc) setupCgroup(cgPath string, lim runtime.Limits) error {
	if d := r.opts.Delegated; r.opts.Rootless && d != nil {
		cpus := 0.0
		if d.CPU {
			cpus = lim.CPUs
		}
		return process.CreateDelegatedCgroup(cgPath, lim.MemoryBytes, process.RunscHostPids(lim.Pids, r.ro.Platform), cpus)
	}
	if r.opts.Rootless {
		return nil
	}
	return process.CreateCgroup(cgPath, lim.MemoryBytes, process.RunscHostPids(lim.Pids, r.ro.Platform))
}

// logErrors returns the error-level messages of a JSON log (runc, runsc).
func logErrors(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var msgs []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// runsc writes its JSON records without newlines between them.
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		for {
			var rec struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
			}
			if err := dec.Decode(&rec); err != nil {
				break
			}
			switch strings.ToLower(rec.Level) {
			case "error", "fatal", "panic":
				msgs = append(msgs, rec.Msg)
			}
		}
	}
	if len(msgs) == 0 {
		return ""
	}
	// The last one is the summary both CLIs print when they give up.
	return msgs[len(msgs)-1]
}

var (
	_ runtime.SessionBackend  = (*Runsc)(nil)
	_ runtime.SessionRestorer = (*Runsc)(nil)
	_ runtime.Checkpointer    = (*sessionSandbox)(nil)
	_ runtime.Freezer         = (*sessionSandbox)(nil)
)

// SessionIdentity implements runtime.SessionRestorer.
func (r *Runsc) SessionIdentity(ctx context.Context, spec runtime.SandboxSpec) (runtime.SandboxIdentity, error) {
	return r.eng.sessionSpecIdentity(ctx, spec)
}

// RestoreSession implements runtime.SessionRestorer.
func (r *Runsc) RestoreSession(ctx context.Context, spec runtime.SandboxSpec, imageDir, workDir string, bg []runtime.BackgroundRun) (runtime.SessionSandbox, error) {
	return r.eng.restoreSession(ctx, spec, imageDir, workDir, bg)
}

// CreateSession boots a session sandbox (see session.go).
func (r *Runsc) CreateSession(ctx context.Context, spec runtime.SandboxSpec) (runtime.SessionSandbox, error) {
	return r.eng.createSession(ctx, spec)
}
