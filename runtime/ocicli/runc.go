package ocicli

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/process"
)

// Runc runs jobs in plain Linux containers through the runc CLI. The script
// talks to the host kernel, so the spec carries all of the isolation: no
// capabilities, no_new_privileges, the seccomp allowlist, a cgroup namespace
// and, by default, a user namespace in which the container's uid 0..65535
// are host uids oci.DefaultUserNSBase.. (its nobody is no one on the host).
//
// `runc run --keep` leaves the stopped container, and so its cgroup, in
// place until we delete it, which is how the OOM and pids counters are read.
type Runc struct {
	cliBackend
	opts runtime.Options
	ro   RuncOptions
}

var (
	_ runtime.Runtime   = (*Runc)(nil)
	_ runtime.Lifecycle = (*Runc)(nil)
)

func init() {
	runtime.Register("runc", func(o runtime.Options) (runtime.Runtime, error) { return NewRunc(o) })
}

// RuncOptions are the runc backend's own options (runtime.Options.Backend;
// from the config file, its runtime "runc" {} block).
type RuncOptions struct {
	Binary   string   // path or name of runc; default "runc"
	StateDir string   // its --root; default /run/skillbox/runc
	Flags    []string // extra global flags, passed before the subcommand
	// UserNSBase is the first host uid/gid of the 65536 ids runc maps the
	// container's ids to; 0 means oci.DefaultUserNSBase. NoUserNS turns the
	// user namespace off (e.g. on hosts that forbid them).
	UserNSBase uint32
	NoUserNS   bool
}

// DecodeRuncOptions takes RuncOptions from a runtime "runc" block's
// settings: binary, state_dir and flags.
func DecodeRuncOptions(s runtime.Settings) (RuncOptions, error) {
	var o RuncOptions
	err := s.Decode(map[string]any{"binary": &o.Binary, "state_dir": &o.StateDir, "flags": &o.Flags})
	return o, err
}

// NewRunc makes the runc backend. A missing runc binary is reported by
// Version and Run (ErrUnavailable).
func NewRunc(opts runtime.Options) (*Runc, error) {
	if opts.Rootless {
		return nil, runtime.RefuseRootless("runc")
	}
	ro, err := runtime.BackendOptions("runc", opts, DecodeRuncOptions)
	if err != nil {
		return nil, err
	}
	opts = withDefaults(opts)
	ro.Binary, ro.StateDir = binaryOr(ro.Binary, "runc"), stateDirOr(ro.StateDir, "runc")
	if ro.UserNSBase == 0 {
		ro.UserNSBase = oci.DefaultUserNSBase
	}
	if uint64(ro.UserNSBase)+oci.UserNSSize > 1<<32-1 {
		return nil, fmt.Errorf("runc: user namespace base %d leaves no room for %d ids", ro.UserNSBase, oci.UserNSSize)
	}
	r := &Runc{opts: opts, ro: ro}
	r.cli = &ociCLI{
		name:    "runc",
		binary:  ro.Binary,
		root:    ro.StateDir,
		global:  append([]string(nil), ro.Flags...),
		install: "apt-get install runc",
	}
	r.eng = &engine{
		name:     "runc",
		cli:      r.cli,
		runDir:   opts.RunDir,
		log:      runtime.NamedLogger(opts.Logger, "runtime.runc"),
		grace:    opts.KillGraceOrDefault(),
		d:        r,
		cgParent: oci.CgroupParent,
	}
	return r, nil
}

func (r *Runc) Name() string { return "runc" }

// Run runs job in a fresh runc container and removes it.
func (r *Runc) Run(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
	return runtime.RunLifecycle(ctx, r, job)
}

func (r *Runc) specOptions(job runtime.Job) oci.SpecOptions {
	return process.RuncSpecOptions(r.opts.NetNS, r.ro.UserNSBase, r.ro.NoUserNS)
}

func (r *Runc) setupCgroup(string, runtime.Limits) error { return nil } // runc makes it from the spec

// enforcement: runc writes every sandbox limit into the run's cgroup from
// the spec, and mounts /tmp as a kernel tmpfs of its size.
func (r *Runc) enforcement() map[string]string {
	return runtime.Enforcement(map[string]string{
		"memory": runtime.EnforcedByCgroup, "pids": runtime.EnforcedByCgroup, "cpus": runtime.EnforcedByCgroup,
		"workdir": runtime.EnforcedByTmpfs, "tmp": runtime.EnforcedByTmpfs,
	})
}

const runcLog = "runc.log"

func (r *Runc) runCommand(_ bool, b *oci.Bundle) ([]string, []string) {
	global := []string{"--log", filepath.Join(b.Dir, runcLog), "--log-format", "json"}
	return global, []string{"run", "--keep", "--bundle", b.Dir, b.ID}
}

// detachedRunCommand: runc's warm sandboxes keep their attached `run`,
// whose exit status is the first process's.
func (r *Runc) detachedRunCommand(bool, *oci.Bundle, int) ([]string, []string, bool) {
	return nil, nil, false
}

func (r *Runc) execCommand(b *oci.Bundle, processFile string) ([]string, []string) {
	global := []string{"--log", filepath.Join(b.Dir, runcLog), "--log-format", "json"}
	return global, []string{"exec", "--process", processFile, b.ID}
}

// runc logs why it failed at level error; a script's exit code never gets
// there, so any error record means the container did not run as asked.
func (r *Runc) setupError(b *oci.Bundle, code int) error {
	if code == 0 {
		return nil
	}
	if msg := logErrors(filepath.Join(b.Dir, runcLog)); msg != "" {
		return fmt.Errorf("runc could not run the container: %s", msg)
	}
	return nil
}
