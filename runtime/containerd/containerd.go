// Package containerd is skillbox's runtime backend over a containerd daemon:
// the containers and tasks of runs live in containerd (namespace "skillbox"
// by default), visible to its tooling (ctr, metrics), and a runtime handler
// (a shim) runs them: gVisor's containerd-shim-runsc-v1 by default, or the
// runc v2 shim running runsc or runc.
//
// It is the same sandbox as the runsc and runc backends: the bundle, the OCI
// spec (oci.BuildSpec, with the options of the OCI runtime the handler
// runs), the workdir with its inputs, the output capture, the end of run
// rules and the outputs all come from runtime/oci and runtime/process; only
// how a process is started, waited for and killed is containerd's, and the
// rootfs: a fresh read-only snapshot of the job's image, imported from
// skillbox's store or pulled, with a dependency layer as one more layer of
// an image made per (image, layer) (see snapshot.go). The task's stdio are
// the capture's pipes through FIFOs in the run dir, and runsc under a shim
// reporting a killed sandbox as 255 is turned into the signal skillbox sent,
// as the other backends report it.
//
// A lease per sandbox (id = the run's id, labelled with its run dir) holds
// whatever containerd keeps for the run; the container carries the run dir
// as a label, so Sweep applies the same rule as the other backends: a run
// dir whose lock is free belongs to a dead run, and its container, task,
// lease, shim, cgroup and workdir go. A task lives in its shim, also while
// it waits in the pool, so each sandbox has a sandbox watchdog (watchdog.go)
// that sweeps it if the daemon dies.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	clog "github.com/containerd/log"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/process"
)

// Name is the backend's name in runtime.New and the config.
const Name = "containerd"

// Defaults and the handlers skillbox knows.
const (
	DefaultAddress   = "/run/containerd/containerd.sock"
	DefaultNamespace = "skillbox"
	// HandlerRunsc is gVisor's shim, containerd-shim-runsc-v1 (built from
	// the pinned gVisor by hack/install-runsc.sh, next to runsc).
	HandlerRunsc = runtime.ContainerdHandlerRunsc
	// HandlerRuncV2 is containerd's runc shim; Binary picks the OCI
	// runtime it runs (runc by default, or a runsc).
	HandlerRuncV2  = runtime.ContainerdHandlerRuncV2
	DefaultHandler = HandlerRunsc
	// RunscShim is the binary containerd looks for on its PATH for
	// HandlerRunsc.
	RunscShim = "containerd-shim-runsc-v1"
	// DefaultStateDir holds the shims' runtime state and the runsc
	// configs; DefaultRunDir the bundles (the same as the other backends').
	DefaultStateDir = runtime.DefaultStateBase + "/containerd"
)

// Labels on skillbox's containers and leases.
const (
	// LabelRunDir is the run dir (bundle) a container or lease was made for.
	LabelRunDir = "skillbox.run-dir"
)

// leaseExpiry is a backstop: a lease Sweep never got to still expires.
const leaseExpiry = 24 * time.Hour

// connectTimeout bounds dialling the daemon.
const connectTimeout = 5 * time.Second

// Containerd runs jobs as containerd containers.
type Containerd struct {
	opts      runtime.Options
	co        Options
	address   string
	namespace string
	handler   string
	binary    string // the OCI runtime the shim runs
	gvisor    bool
	platform  string
	specOpts  oci.SpecOptions
	log       runtime.Logger
	grace     time.Duration

	mu     sync.Mutex
	client *containerd.Client
	live   process.Live[*sandbox]

	verMu   sync.Mutex
	version string

	imgs imageCache
}

var (
	_ runtime.Runtime   = (*Containerd)(nil)
	_ runtime.Lifecycle = (*Containerd)(nil)
	_ runtime.Sweeper   = (*Containerd)(nil)
)

func init() {
	runtime.Register(Name, func(o runtime.Options) (runtime.Runtime, error) { return New(o) })
	// The client library logs to stderr on its own (e.g. each failed
	// registry request at info level); the errors it returns carry the
	// same facts, and skillbox reports them.
	_ = clog.SetLevel("warn")
}

// Options are the containerd backend's own options
// (runtime.Options.Backend; from the config file, its runtime "containerd"
// {} block). Zero values mean the defaults.
type Options struct {
	Address   string // the daemon's socket; default DefaultAddress
	Namespace string // the namespace skillbox's containers live in; default DefaultNamespace
	Handler   string // the runtime handler (shim) that runs them; default DefaultHandler
	// Binary is the OCI runtime the shim runs: for HandlerRunsc the pinned
	// runsc by default, for HandlerRuncV2 runc (or a runsc).
	Binary   string
	StateDir string   // the shims' runtime state and runsc configs; default DefaultStateDir
	Platform string   // runsc's --platform; the pinned build's default is systrap
	Flags    []string // extra runsc flags (its config file)
	// UserNSBase and NoUserNS: see ocicli.RuncOptions (runc only).
	UserNSBase uint32
	NoUserNS   bool
}

// DecodeOptions takes Options from a runtime "containerd" block's
// settings: address, namespace, handler, binary, state_dir, platform and
// flags.
func DecodeOptions(s runtime.Settings) (Options, error) {
	var o Options
	err := s.Decode(map[string]any{"address": &o.Address, "namespace": &o.Namespace, "handler": &o.Handler,
		"binary": &o.Binary, "state_dir": &o.StateDir, "platform": &o.Platform, "flags": &o.Flags})
	return o, err
}

// New makes the backend. Nothing is dialled here: an unreachable daemon or
// a missing handler is reported by Version and Run (runtime.ErrUnavailable),
// so a daemon can start and say what to install.
func New(opts runtime.Options) (*Containerd, error) {
	if opts.Rootless {
		return nil, runtime.RefuseRootless(Name)
	}
	co, err := runtime.BackendOptions(Name, opts, DecodeOptions)
	if err != nil {
		return nil, err
	}
	c := &Containerd{opts: opts, co: co, address: co.Address, namespace: co.Namespace, handler: co.Handler,
		binary: co.Binary, platform: co.Platform}
	if c.address == "" {
		c.address = DefaultAddress
	}
	if c.namespace == "" {
		c.namespace = DefaultNamespace
	}
	if c.handler == "" {
		c.handler = DefaultHandler
	}
	switch c.handler {
	case HandlerRunsc:
		if c.binary == "" {
			c.binary = runtime.PinnedRunscPath()
		}
		c.gvisor = true
	case HandlerRuncV2:
		if c.binary == "" {
			c.binary = "runc"
		}
		c.gvisor = strings.Contains(filepath.Base(c.binary), "runsc")
	default:
		return nil, errkind.Errorf(runtime.ErrUnavailable, "containerd handler %q: choose %s (gVisor) or %s (with binary runsc or runc)", c.handler, HandlerRunsc, HandlerRuncV2)
	}
	if c.gvisor && c.platform == "" && filepath.Clean(c.binary) == runtime.PinnedRunscPath() {
		c.platform = runtime.PinnedRunscPlatform
	}
	if c.co.StateDir == "" {
		c.co.StateDir = DefaultStateDir
	}
	if c.opts.RunDir == "" {
		c.opts.RunDir = runtime.DefaultRunDir
	}
	if c.gvisor {
		c.specOpts = process.RunscSpecOptions(opts.NetNS)
	} else {
		c.specOpts = process.RuncSpecOptions(opts.NetNS, co.UserNSBase, co.NoUserNS)
	}
	c.log = runtime.NamedLogger(opts.Logger, "runtime.containerd")
	c.grace = opts.KillGraceOrDefault()
	return c, nil
}

func (c *Containerd) Name() string { return Name }

// Address, Namespace and Handler are what the backend uses.
func (c *Containerd) Address() string   { return c.address }
func (c *Containerd) Namespace() string { return c.namespace }
func (c *Containerd) Handler() string   { return c.handler }

// ctx puts the backend's namespace into ctx.
func (c *Containerd) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, c.namespace)
}

// connect dials the daemon once; a failure is not cached.
func (c *Containerd) connect(ctx context.Context) (*containerd.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil {
		return c.client, nil
	}
	if _, err := os.Stat(c.address); err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "containerd socket %s: %w: start containerd (apt-get install containerd; or hack/containerd.sh start DIR for a private one) or set the containerd address", c.address, err)
	}
	cl, err := containerd.New(c.address, containerd.WithDefaultNamespace(c.namespace), containerd.WithTimeout(connectTimeout))
	if err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "connect to containerd at %s: %w", c.address, err)
	}
	c.client = cl
	return cl, nil
}

// Version names containerd's version, the handler and the OCI runtime's
// version, after checking that all of them are there.
func (c *Containerd) Version(ctx context.Context) (string, error) {
	c.verMu.Lock()
	defer c.verMu.Unlock()
	if c.version != "" {
		return c.version, nil
	}
	cl, err := c.connect(ctx)
	if err != nil {
		return "", err
	}
	v, err := cl.Version(ctx)
	if err != nil {
		return "", errkind.Errorf(runtime.ErrUnavailable, "containerd at %s: %w", c.address, err)
	}
	if err := c.checkHandler(); err != nil {
		return "", err
	}
	rv, err := binaryVersion(ctx, c.binary)
	if err != nil {
		return "", err
	}
	c.version = fmt.Sprintf("containerd %s, %s, %s", v.Version, c.handler, rv)
	return c.version, nil
}

// checkHandler makes sure the shim and the OCI runtime it runs exist. The
// shim is looked for where containerd finds it: on PATH, or next to the
// pinned runsc (hack/containerd.sh puts that directory on its PATH).
func (c *Containerd) checkHandler() error {
	if c.handler == HandlerRunsc {
		if !HasCapSysResource() {
			return errkind.Errorf(runtime.ErrUnavailable, "containerd handler %s cannot start here: gVisor's shim sets its OOM score to -999, which needs CAP_SYS_RESOURCE, and this host's root lacks it: choose handler %s with binary runsc (still gVisor)", c.handler, HandlerRuncV2)
		}
		_, err := exec.LookPath(RunscShim)
		if err != nil {
			if _, err2 := os.Stat(filepath.Join(filepath.Dir(runtime.PinnedRunscPath()), RunscShim)); err2 != nil {
				return errkind.Errorf(runtime.ErrUnavailable, "containerd handler %s needs %s on containerd's PATH (not found: %v): install it with %s and put %s on containerd's PATH, or choose handler %s", c.handler, RunscShim, err, runtime.RunscInstallCommand, filepath.Dir(runtime.PinnedRunscPath()), HandlerRuncV2)
			}
		}
	}
	if _, err := exec.LookPath(c.binary); err != nil {
		hint := "apt-get install runc"
		if c.gvisor {
			hint = runtime.RunscInstallCommand + " (as root, from the skillbox source tree)"
		}
		return errkind.Errorf(runtime.ErrUnavailable, "%s for containerd handler %s not found (%v): install it with %s", c.binary, c.handler, err, hint)
	}
	return nil
}

func binaryVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", errkind.Errorf(runtime.ErrUnavailable, "%s --version: %v: %s", bin, err, strings.TrimSpace(string(out)))
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line), nil
}

// Run runs job in a fresh container and removes it.
func (c *Containerd) Run(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
	return runtime.RunLifecycle(ctx, c, job)
}

// runtimeOptions are the options containerd hands the shim.
func (c *Containerd) runtimeOptions(network bool) (any, error) {
	// The OCI runtime's root is in the state dir: closed before it runs.
	if err := oci.MakePrivateDir(c.co.StateDir, "containerd state dir"); err != nil {
		return nil, err
	}
	if c.handler == HandlerRuncV2 {
		bin := c.binary
		if c.gvisor {
			var err error
			if bin, err = c.runscWrapper(network); err != nil {
				return nil, err
			}
		}
		return &runcoptions.Options{BinaryName: bin, Root: filepath.Join(c.co.StateDir, "runc")}, nil
	}
	p, err := c.runscConfig(network)
	if err != nil {
		return nil, err
	}
	return &runtimeoptions.Options{TypeUrl: "io.containerd.runsc.v1.options", ConfigPath: p}, nil
}

// runscFlags are the runsc flags of a sandbox: the network mode (none
// unless the job has network, as the runsc backend runs it), the platform
// and the configured flags.
func (c *Containerd) runscFlags(network bool) map[string]string {
	f := map[string]string{"network": "none"}
	if network {
		f["network"] = "sandbox"
	}
	if c.platform != "" {
		f["platform"] = c.platform
	}
	for _, fl := range c.co.Flags {
		k, v, ok := strings.Cut(strings.TrimLeft(fl, "-"), "=")
		if !ok {
			v = "true"
		}
		f[k] = v
	}
	return f
}

// runscWrapper is the runtime binary the runc v2 shim runs for gVisor: a
// script in the state dir that runs runsc with runscFlags (that shim has
// no way to pass flags).
func (c *Containerd) runscWrapper(network bool) (string, error) {
	flags := c.runscFlags(network)
	keys := slices.Sorted(maps.Keys(flags))
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# Written by skillbox: runsc with the flags of its sandboxes.\nexec %s", shellQuote(c.binary))
	for _, k := range keys {
		fmt.Fprintf(&b, " %s", shellQuote("--"+k+"="+flags[k]))
	}
	b.WriteString(" \"$@\"\n")
	return c.writeState("runsc-network-"+flags["network"], b.String(), 0o700)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeState writes name in the state dir atomically, unless it already
// holds content.
func (c *Containerd) writeState(name, content string, mode os.FileMode) (string, error) {
	// Root's alone: it holds the shims' runtime state (runc's and runsc's
	// copies of the specs).
	if err := oci.MakePrivateDir(c.co.StateDir, "containerd state dir"); err != nil {
		return "", err
	}
	p := filepath.Join(c.co.StateDir, name)
	if old, err := os.ReadFile(p); err == nil && string(old) == content {
		return p, nil
	}
	tmp, err := os.CreateTemp(c.co.StateDir, "."+name+"-*")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	_, werr := tmp.WriteString(content)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), mode)); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return p, nil
}

// runscConfig writes the gVisor shim's config (which runsc, its state
// dir, its flags) into the state dir, once per network mode.
func (c *Containerd) runscConfig(network bool) (string, error) {
	flags := c.runscFlags(network)
	keys := slices.Sorted(maps.Keys(flags))
	var b strings.Builder
	fmt.Fprintf(&b, "binary_name = %q\nroot = %q\n\n[runsc_config]\n", c.binary, filepath.Join(c.co.StateDir, "runsc"))
	for _, k := range keys {
		fmt.Fprintf(&b, "  %q = %q\n", k, flags[k])
	}
	return c.writeState("runsc-network-"+flags["network"]+".toml", b.String(), 0o600)
}

// Close destroys the sandboxes still there and closes the connection.
func (c *Containerd) Close(ctx context.Context) error {
	var errs []error
	if err := c.live.DestroyAll(ctx); err != nil {
		errs = append(errs, err)
	}
	c.mu.Lock()
	if c.client != nil {
		if err := c.client.Close(); err != nil {
			errs = append(errs, err)
		}
		c.client = nil
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}

// Sweep removes what dead runs left in the namespace and the run dir: see
// process.SweepRuns. A container or lease counts as this backend's when it
// carries LabelRunDir; which run dir it names decides the rest.
func (c *Containerd) Sweep(ctx context.Context) error {
	cl, err := c.connect(ctx)
	if err != nil {
		return err
	}
	return process.SweepRuns(c.ctx(ctx), c.opts.RunDir, c.log, c.sweepOps(cl))
}

// sweepOps are Sweep's operations on the namespace's containers, also a
// sandbox watchdog's (watchdog.go).
func (c *Containerd) sweepOps(cl *containerd.Client) process.SweepOps {
	return process.SweepOps{
		List:  func(ctx context.Context) ([]process.ContainerState, error) { return c.list(ctx, cl) },
		State: func(ctx context.Context, id string) (*process.ContainerState, error) { return c.state(ctx, cl, id) },
		Delete: func(ctx context.Context, id string) error {
			err := c.remove(ctx, cl, id)
			c.killShims(id)
			return err
		},
	}
}

// list returns skillbox's containers and leases (those without a container).
func (c *Containerd) list(ctx context.Context, cl *containerd.Client) ([]process.ContainerState, error) {
	ctx = c.ctx(ctx)
	cs, err := cl.Containers(ctx, "labels."+`"`+LabelRunDir+`"`)
	if err != nil {
		return nil, fmt.Errorf("list containerd containers: %w", err)
	}
	var out []process.ContainerState
	seen := map[string]bool{}
	for _, ct := range cs {
		labels, err := ct.Labels(ctx)
		if err != nil {
			continue
		}
		seen[ct.ID()] = true
		out = append(out, process.ContainerState{ID: ct.ID(), Bundle: labels[LabelRunDir]})
	}
	ls, err := cl.LeasesService().List(ctx, "labels."+`"`+LabelRunDir+`"`)
	if err != nil {
		return nil, fmt.Errorf("list containerd leases: %w", err)
	}
	for _, l := range ls {
		if !seen[l.ID] {
			out = append(out, process.ContainerState{ID: l.ID, Bundle: l.Labels[LabelRunDir]})
		}
	}
	return out, nil
}

// state is a container's (or, without one, its lease's) run dir; neither
// existing is a not-found error.
func (c *Containerd) state(ctx context.Context, cl *containerd.Client, id string) (*process.ContainerState, error) {
	ctx = c.ctx(ctx)
	ct, err := cl.LoadContainer(ctx, id)
	if err == nil {
		labels, err := ct.Labels(ctx)
		if err != nil {
			return nil, err
		}
		return &process.ContainerState{ID: id, Bundle: labels[LabelRunDir]}, nil
	}
	if !errdefs.IsNotFound(err) {
		return nil, err
	}
	ls, err := cl.LeasesService().List(ctx, `id==`+id)
	if err != nil {
		return nil, err
	}
	if len(ls) == 0 {
		return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return &process.ContainerState{ID: id, Bundle: ls[0].Labels[LabelRunDir]}, nil
}

// remove kills and deletes a container's task, the container and the
// lease of id; what does not exist is no error.
func (c *Containerd) remove(ctx context.Context, cl *containerd.Client, id string) error {
	ctx = c.ctx(ctx)
	var errs []error
	ct, err := cl.LoadContainer(ctx, id)
	switch {
	case err == nil:
		if t, err := ct.Task(ctx, nil); err == nil {
			if err := stopTask(ctx, t); err != nil {
				errs = append(errs, fmt.Errorf("delete task %s: %w", id, err))
			}
		} else if !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("load task %s: %w", id, err))
		}
		if err := ct.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete container %s: %w", id, err))
		}
	case !errdefs.IsNotFound(err):
		errs = append(errs, fmt.Errorf("load container %s: %w", id, err))
	}
	if err := cl.LeasesService().Delete(ctx, leases.Lease{ID: id}); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete lease %s: %w", id, err))
	}
	return errors.Join(errs...)
}

// killShims kills the shim of container id in this daemon and namespace,
// and every process below it, if it outlived its task: a run that died
// while its task was being made leaves a shim containerd never learned
// about, which no delete reaches.
// A shim is recognised by its own command line (containerd-shim-*,
// -namespace NS, -id ID, -address ADDR).
func (c *Containerd) killShims(id string) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	want := []string{"-namespace\x00" + c.namespace + "\x00", "-id\x00" + id + "\x00", "-address\x00" + c.address + "\x00"}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv0, _, _ := strings.Cut(string(raw), "\x00")
		if !strings.HasPrefix(filepath.Base(argv0), "containerd-shim") {
			continue
		}
		cmd := string(raw) + "\x00"
		match := true
		for _, w := range want {
			if !strings.Contains(cmd, w) {
				match = false
				break
			}
		}
		if match {
			// With what it started: a runtime CLI still making the
			// container would otherwise go on (its cgroup made again
			// after the sweep removed it).
			c.log.Info("killing the shim of a removed container", "id", id, "pid", pid)
			if err := process.KillTree(pid, process.KillWait); err != nil {
				c.log.Warn("the shim of a removed container outlived SIGKILL", "id", id, "pid", pid, "err", err)
			}
		}
	}
}

// stopTask kills a task that still runs, waits for it and deletes it.
func stopTask(ctx context.Context, t containerd.Task) error {
	if st, err := t.Status(ctx); err != nil || st.Status != containerd.Stopped {
		if exit, err := t.Wait(ctx); err == nil {
			_ = t.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll)
			select {
			case <-exit:
			case <-time.After(process.KillWait):
			}
		}
	}
	_, err := t.Delete(ctx)
	if err != nil && !errdefs.IsNotFound(err) {
		// Still running after all: have containerd kill it as it deletes.
		if _, err2 := t.Delete(ctx, containerd.WithProcessKill); err2 == nil || errdefs.IsNotFound(err2) {
			return nil
		}
		return err
	}
	return nil
}

// capSysResource is CAP_SYS_RESOURCE's bit in the capability sets.
const capSysResource = 24

// HasCapSysResource reports whether this process may have CAP_SYS_RESOURCE,
// which gVisor's shim (HandlerRunsc) needs
// (containerd and its shims run with the same capabilities as root here).
func HasCapSysResource() bool {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true // cannot tell: let containerd say
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			var bits uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &bits); err != nil {
				return true
			}
			return bits&(1<<capSysResource) != 0
		}
	}
	return true
}

// enforcement names what holds each limit of this backend's runs.
func (c *Containerd) enforcement() map[string]string {
	tmp := runtime.EnforcedByTmpfs
	if c.handler == HandlerRunsc {
		tmp = runtime.EnforcedByGVisor
	}
	return runtime.Enforcement(map[string]string{
		"memory": runtime.EnforcedByCgroup, "pids": runtime.EnforcedByCgroup, "cpus": runtime.EnforcedByCgroup,
		"workdir": runtime.EnforcedByTmpfs, "tmp": tmp,
	})
}
