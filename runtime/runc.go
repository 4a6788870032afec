package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Runc runs jobs in plain Linux containers through the runc CLI. The script
// talks to the host kernel, so the spec carries all of the isolation: no
// capabilities, no_new_privileges, the seccomp allowlist, a cgroup namespace
// and, by default, a user namespace in which the container's uid 0..65535
// are host uids DefaultUserNSBase.. (its nobody is no one on the host).
//
// `runc run --keep` leaves the stopped container, and so its cgroup, in
// place until we delete it, which is how the OOM and pids counters are read.
type Runc struct {
	opts Options
	cli  *ociCLI
	eng  *engine
}

var (
	_ Runtime   = (*Runc)(nil)
	_ Lifecycle = (*Runc)(nil)
)

func init() {
	Register("runc", func(o Options) (Runtime, error) { return NewRunc(o) })
}

// DefaultUserNSBase is the first host uid/gid of the range runc containers
// are mapped to: far above the ranges /etc/subuid hands out (100000+) and
// regular users, below the 32-bit limit.
const DefaultUserNSBase = 1 << 30

// userNSSize covers the container's root and nobody (65534).
const userNSSize = 65536

// NewRunc makes the runc backend. A missing runc binary is reported by
// Version and Run (ErrUnavailable).
func NewRunc(opts Options) (*Runc, error) {
	opts = withDefaults(opts, "runc")
	if opts.UserNSBase == 0 {
		opts.UserNSBase = DefaultUserNSBase
	}
	if uint64(opts.UserNSBase)+userNSSize > 1<<32-1 {
		return nil, fmt.Errorf("runc: user namespace base %d leaves no room for %d ids", opts.UserNSBase, userNSSize)
	}
	r := &Runc{opts: opts}
	r.cli = &ociCLI{
		name:    "runc",
		binary:  opts.Binary,
		root:    opts.StateDir,
		global:  append([]string(nil), opts.Flags...),
		install: "apt-get install runc",
	}
	r.eng = &engine{
		name:   "runc",
		cli:    r.cli,
		runDir: opts.RunDir,
		log:    NamedLogger(opts.Logger, "runtime.runc"),
		grace:  opts.KillGraceOrDefault(),
		d:      r,
	}
	return r, nil
}

func (r *Runc) Name() string { return "runc" }

// Version is the first line of `runc --version`.
func (r *Runc) Version(ctx context.Context) (string, error) { return r.cli.Version(ctx) }

// Run runs job in a fresh runc container and removes it.
func (r *Runc) Run(ctx context.Context, job Job) (*Result, error) { return RunLifecycle(ctx, r, job) }

// Create makes a sandbox (see Lifecycle).
func (r *Runc) Create(ctx context.Context, spec SandboxSpec) (Sandbox, error) {
	return r.eng.create(ctx, spec)
}

// Close destroys the sandboxes of this backend that are still there.
func (r *Runc) Close(ctx context.Context) error { return r.eng.close(ctx) }

// Sweep removes what crashed runs left: see Sweep.
func (r *Runc) Sweep(ctx context.Context) error { return r.eng.sweep(ctx) }

func (r *Runc) specOptions(job Job) SpecOptions { return RuncSpecOptions(r.opts) }

// RuncSpecOptions are the BuildSpec choices of a container that runc runs
// on the host kernel (this backend's, and containerd's with runc as its
// handler): seccomp, a cgroup namespace, no swap and, unless opts say
// otherwise, a user namespace at opts.UserNSBase (DefaultUserNSBase when 0).
func RuncSpecOptions(opts Options) SpecOptions {
	o := SpecOptions{
		Seccomp:      true,
		CgroupNS:     true,
		MaskHostInfo: true,
		SwapLimit:    swapAccounted(),
		NetNS:        opts.NetNS,
	}
	if !opts.NoUserNS {
		base := opts.UserNSBase
		if base == 0 {
			base = DefaultUserNSBase
		}
		o.UserNS = &IDMap{HostUID: base, HostGID: base, Size: userNSSize}
	}
	return o
}

func (r *Runc) setupCgroup(string, Limits) error { return nil } // runc makes it from the spec

const runcLog = "runc.log"

func (r *Runc) runCommand(_ bool, b *Bundle) ([]string, []string) {
	global := []string{"--log", filepath.Join(b.Dir, runcLog), "--log-format", "json"}
	return global, []string{"run", "--keep", "--bundle", b.Dir, b.ID}
}

// detachedRunCommand: runc's warm sandboxes keep their attached `run`,
// whose exit status is the first process's.
func (r *Runc) detachedRunCommand(bool, *Bundle, int) ([]string, []string, bool) {
	return nil, nil, false
}

func (r *Runc) execCommand(b *Bundle, processFile string) ([]string, []string) {
	global := []string{"--log", filepath.Join(b.Dir, runcLog), "--log-format", "json"}
	return global, []string{"exec", "--process", processFile, b.ID}
}

// runc logs why it failed at level error; a script's exit code never gets
// there, so any error record means the container did not run as asked.
func (r *Runc) setupError(b *Bundle, code int) error {
	if code == 0 {
		return nil
	}
	if msg := logErrors(filepath.Join(b.Dir, runcLog)); msg != "" {
		return fmt.Errorf("runc could not run the container: %s", msg)
	}
	return nil
}

// swapAccounted reports whether memory+swap can be limited (cgroup v1 needs
// swap accounting on; v2 has memory.swap.max whenever swap is compiled in).
func swapAccounted() bool {
	if isCgroup2() {
		return true
	}
	_, err := os.Stat(filepath.Join(cgroupRoot, "memory", "memory.memsw.limit_in_bytes"))
	return err == nil
}
