// Package oci turns a runtime.Job into an OCI bundle, and reads back what the
// run left in it, for every backend alike: BuildSpec makes the runtime spec
// that is the isolation contract (read-only image and skill, capped tmpfs
// workdir and /tmp, nobody without capabilities, the allowlisted
// environment, no network but loopback, cgroup limits, seccomp); a Bundle
// is a run's locked run dir with its workdir, hosts file, skills dir and
// config.json; the input writer puts the job's files into the workdir, and
// CollectOutputs reads back what the script created or changed without
// following links; Capture caps an output stream.
//
// It starts no process and touches no cgroup: how a bundle's container is
// started, watched and torn down is the backend's (runtime/ocicli,
// runtime/containerd), with the host pieces they share in runtime/process.
package oci

import (
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// SpecOptions are the per-backend and per-run choices BuildSpec cannot derive
// from the Job itself. Keeping them explicit makes the spec a pure function of
// (Job, SpecOptions), which is what the golden tests pin down.
type SpecOptions struct {
	// WorkdirSource is the host directory bind-mounted read-write at /work
	// (normally a size-capped tmpfs the bundle code mounted). Required.
	WorkdirSource string
	// HostsSource is the host file bind-mounted read-only at /etc/hosts
	// (the image must have that file as its mount point), so that
	// localhost resolves. Required; PrepareBundle writes it.
	HostsSource string
	// CgroupsPath is the run's fixed cgroup, so its OOM and pids counters can
	// be read after the process ended. Default CgroupParent + "/" + job.ID.
	CgroupsPath string
	// Seccomp adds DefaultSeccomp (runc). gVisor filters in its own sentry and
	// the spec's profile would only apply inside it, so runsc leaves it off.
	Seccomp bool
	// UserNS, when set, runs the container in a user namespace mapping
	// container IDs 0..Size-1 to host IDs HostID..HostID+Size-1.
	UserNS *IDMap
	// CgroupNS gives the container its own cgroup namespace (runc), so
	// /proc/self/cgroup does not show host paths.
	CgroupNS bool
	// SwapLimit sets memory+swap equal to memory (no swap). Leave it off on
	// hosts without swap accounting, where runc refuses the field.
	SwapLimit bool
	// SkillsSource is the host directory bind-mounted read-only at
	// SkillsMount, holding the mount points of SandboxSpec.Skills and the program;
	// required when the job has either. PrepareBundle makes it.
	SkillsSource string
	// MaskHostInfo masks, beyond maskedPaths, the /proc files through which
	// a container sharing the host kernel (runc) reads about the host: its
	// kernel command line, modules and symbols, disks. gVisor shows its own
	// versions of them, so runsc leaves it off.
	MaskHostInfo bool
	// NetNS is the path of a configured network namespace joined when
	// job.Network is set. Without it a job asking for network is refused:
	// an empty namespace would give it no network while looking like it did.
	NetNS string
	// ResolvConfSource is the host file bind-mounted read-only at
	// /etc/resolv.conf and EgressEnv what the environment gets, for a job
	// with Egress (the engine fills both from the run's egress.Egress).
	ResolvConfSource string
	EgressEnv        []string
	// CABundleSource, when set, is bind-mounted read-only at
	// egress.CABundlePath (a run with secrets).
	CABundleSource string
	// Rootless is a gVisor sandbox that an ordinary user starts (runsc
	// --rootless, see runtime/rootless): its script runs as uid 0 of
	// gVisor's kernel, which is the user on the host (gVisor maps only
	// that uid; a file made by its nobody would have no host owner), still
	// without any capability; there is no cgroup to put limits in, so the
	// spec has none (nothing in it looks like a limit it does not get),
	// and the sentry bounds the sandbox's tasks with RLIMIT_NPROC instead.
	Rootless bool
	// ConfiningSupervisor, for a session sandbox whose supervisor starts
	// every run confined (`skillbox supervise --job-uid`), makes the first
	// process uid 0 of the sandbox with ConfiningCapabilities and no other
	// (no_new_privileges stays): the runs, as another uid in namespaces of
	// their own, get none of them. Off, the supervisor runs as the job's
	// user, without any capability.
	ConfiningSupervisor bool
}

// ConfiningCapabilities are what a confining supervisor holds: CAP_SETUID
// and CAP_SETGID to write its jobs' user namespace id maps, CAP_CHOWN to
// give /work and the logs it makes to the job, CAP_DAC_OVERRIDE to write
// the logs in the job's /work. All four are in containerd's default set
// and allowed by Pod Security "baseline"; none is CAP_SYS_ADMIN.
var ConfiningCapabilities = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_SETGID", "CAP_SETUID"}

// IDMap is a contiguous user/group ID mapping for a user namespace.
type IDMap struct {
	HostUID uint32
	HostGID uint32
	Size    uint32
}

// CgroupParent is the cgroup under which every run gets its own child.
const CgroupParent = "/skillbox"

// Hostname is the container's hostname (also its domainname is left empty).
const Hostname = "skillbox"

// Sizes of the small fixed tmpfs mounts under /dev.
const (
	devTmpfsSize = 64 << 10
	shmSize      = 64 << 20
)

// Rlimits every process starts with. NPROC is deliberately absent: it counts
// per host uid, and all runs share uid 65534, so concurrent runs would starve
// each other; the pids cgroup bounds processes per run instead.
var defaultRlimits = []specs.POSIXRlimit{
	{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024},
	{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
	{Type: "RLIMIT_MEMLOCK", Hard: 64 << 10, Soft: 64 << 10},
	{Type: "RLIMIT_MSGQUEUE", Hard: 800 << 10, Soft: 800 << 10},
}

// maskedPaths and readonlyPaths follow what containerd and Docker hide from
// containers by default: kernel memory, keys, timers and firmware are masked;
// knobs under /proc that would change the host are read-only.
var maskedPaths = []string{
	"/proc/acpi",
	"/proc/asound",
	"/proc/interrupts",
	"/proc/kcore",
	"/proc/keys",
	"/proc/latency_stats",
	"/proc/sched_debug",
	"/proc/scsi",
	"/proc/timer_list",
	"/proc/timer_stats",
	"/sys/devices/virtual/powercap",
	"/sys/firmware",
}

// HostInfoPaths are masked when SpecOptions.MaskHostInfo is set. What
// cannot be masked this way under runc is listed in docs/SECURITY.md
// (mountinfo names host paths; the kernel version is the host's).
var HostInfoPaths = []string{
	"/proc/cmdline",
	"/proc/diskstats",
	"/proc/kallsyms",
	"/proc/modules",
	"/proc/partitions",
}

var readonlyPaths = []string{
	"/proc/bus",
	"/proc/fs",
	"/proc/irq",
	"/proc/sys",
	"/proc/sysrq-trigger",
}

// BuildSpec returns the OCI runtime spec for one run of job. It validates the
// job (ErrInvalidJob) and applies DefaultLimits to zero limits. The spec is
// the whole isolation contract for runc; for runsc gVisor adds its own kernel
// between the script and the host on top of it.
func BuildSpec(job runtime.Job, opts SpecOptions) (*specs.Spec, error) {
	if err := runtime.ValidateJob(job); err != nil {
		return nil, err
	}
	if !runtime.IsCleanAbs(opts.WorkdirSource) {
		return nil, errkind.Errorf(runtime.ErrInvalidJob, "workdir source %q must be an absolute, clean host path", opts.WorkdirSource)
	}
	if job.Sandbox.Egress != nil && (opts.NetNS == "" || !runtime.IsCleanAbs(opts.ResolvConfSource)) {
		return nil, errkind.Errorf(runtime.ErrInvalidJob, "the job has egress but its network namespace or resolv.conf is not set up")
	}
	if job.Sandbox.Network && opts.NetNS == "" {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "the job asks for network but no network namespace is configured for this runtime (set its netns to a prepared namespace, e.g. /var/run/netns/skillbox)")
	}
	if opts.UserNS != nil && opts.UserNS.Size <= runtime.ContainerUID {
		return nil, errkind.Errorf(runtime.ErrInvalidJob, "user namespace size %d must cover uid %d", opts.UserNS.Size, runtime.ContainerUID)
	}
	if !runtime.IsCleanAbs(opts.HostsSource) {
		return nil, errkind.Errorf(runtime.ErrInvalidJob, "hosts file source %q must be an absolute, clean host path", opts.HostsSource)
	}
	if job.Sandbox.UsesSkillsDir() && !runtime.IsCleanAbs(opts.SkillsSource) {
		return nil, errkind.Errorf(runtime.ErrInvalidJob, "skills dir source %q must be an absolute, clean host path", opts.SkillsSource)
	}
	env, err := runtime.ContainerEnv(job.Invocation.Env)
	if err != nil {
		return nil, err
	}
	env = append(env, job.Invocation.ModuleEnv...)
	if job.Sandbox.Egress != nil {
		env = append(env, opts.EgressEnv...)
	}
	if opts.Rootless && (opts.UserNS != nil || job.Sandbox.Network || job.Sandbox.Egress != nil) {
		return nil, errkind.Errorf(runtime.ErrInvalidJob, "a rootless sandbox has neither a user namespace mapping nor a network")
	}
	if opts.ConfiningSupervisor && (job.Sandbox.Session == nil || opts.Rootless) {
		return nil, errkind.Errorf(runtime.ErrInvalidJob, "a confining supervisor needs a session sandbox with root (a rootless sandbox maps only one uid)")
	}
	lim := job.Limits()
	cgPath := opts.CgroupsPath
	if cgPath == "" {
		cgPath = CgroupParent + "/" + job.Sandbox.ID
	}

	empty := []string{}
	s := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Terminal: false,
			User:     specs.User{UID: runtime.ContainerUID, GID: runtime.ContainerGID},
			Args:     append([]string(nil), job.Invocation.Args...),
			Env:      env,
			Cwd:      runtime.WorkDir,
			// Non-nil with empty sets: runc then clears every set, including
			// bounding and ambient; a nil pointer would leave them alone.
			Capabilities: &specs.LinuxCapabilities{
				Bounding: empty, Effective: empty, Inheritable: empty, Permitted: empty, Ambient: empty,
			},
			Rlimits:         append([]specs.POSIXRlimit(nil), defaultRlimits...),
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: job.Sandbox.RootFS, Readonly: true},
		Hostname: Hostname,
		Mounts:   buildMounts(job, opts, lim),
		Linux: &specs.Linux{
			Resources:     buildResources(lim, opts.SwapLimit),
			CgroupsPath:   cgPath,
			Namespaces:    buildNamespaces(job, opts),
			MaskedPaths:   append([]string(nil), maskedPaths...),
			ReadonlyPaths: append([]string(nil), readonlyPaths...),
		},
	}
	if opts.Rootless {
		s.Process.User = specs.User{UID: 0, GID: 0}
		s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: uint64(lim.Pids), Soft: uint64(lim.Pids)})
		// A delegated cgroup (CgroupsPath) is made with its limits
		// before runsc joins it; none otherwise.
		s.Linux.Resources, s.Linux.CgroupsPath = nil, opts.CgroupsPath
	}
	if opts.ConfiningSupervisor {
		caps := append([]string(nil), ConfiningCapabilities...)
		s.Process.User = specs.User{UID: 0, GID: 0}
		s.Process.Capabilities = &specs.LinuxCapabilities{
			Bounding: caps, Effective: caps, Permitted: caps, Inheritable: empty, Ambient: empty,
		}
	}
	if opts.UserNS != nil {
		s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: opts.UserNS.HostUID, Size: opts.UserNS.Size}}
		s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: opts.UserNS.HostGID, Size: opts.UserNS.Size}}
	}
	if opts.Seccomp {
		s.Linux.Seccomp = DefaultSeccomp()
	}
	if opts.MaskHostInfo {
		s.Linux.MaskedPaths = append(s.Linux.MaskedPaths, HostInfoPaths...)
	}
	return s, nil
}

func buildNamespaces(job runtime.Job, opts SpecOptions) []specs.LinuxNamespace {
	ns := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.MountNamespace},
	}
	if job.Sandbox.Network || job.Sandbox.Egress != nil {
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: opts.NetNS})
	} else {
		// A fresh namespace has only a loopback device: no route anywhere,
		// including the cloud metadata address. runc brings lo up in a new
		// namespace and runsc --network=none gives one too, so a script can
		// serve on localhost and talk to itself.
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	if opts.CgroupNS {
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	if opts.UserNS != nil {
		ns = append(ns, specs.LinuxNamespace{Type: specs.UserNamespace})
	}
	return ns
}

func buildMounts(job runtime.Job, opts SpecOptions, lim runtime.Limits) []specs.Mount {
	size := func(n int64) string { return "size=" + strconv.FormatInt(n, 10) }
	m := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", size(devTmpfsSize)}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", size(min(shmSize, lim.TmpBytes))}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
	}
	// sysfs may only be mounted by the owner of the network namespace, so it
	// is there only when the container has a fresh one (the default).
	if !job.Sandbox.Network && job.Sandbox.Egress == nil {
		m = append(m, specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}})
	}
	if job.Sandbox.SkillDir != "" {
		// Not noexec: a script run through its shebang is exec'd from here.
		// Nothing is gained by noexec anyway, as /work is writable.
		m = append(m, specs.Mount{Destination: runtime.SkillMount, Type: "bind", Source: job.Sandbox.SkillDir, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	m = append(m, skillsMounts(job, opts.SkillsSource)...)
	m = append(m, sessionMounts(job.Sandbox.Session)...)
	m = append(m,
		specs.Mount{Destination: runtime.WorkDir, Type: "bind", Source: opts.WorkdirSource, Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", size(lim.TmpBytes)}},
		specs.Mount{Destination: "/etc/hosts", Type: "bind", Source: opts.HostsSource, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}},
	)
	if job.Sandbox.DepsDir != "" {
		m = append(m, specs.Mount{Destination: runtime.DepsMount, Type: "bind", Source: job.Sandbox.DepsDir, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	if job.Sandbox.Egress != nil {
		m = append(m, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: opts.ResolvConfSource, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		if opts.CABundleSource != "" {
			// In /tmp (a tmpfs made above) because the image may lack a
			// file to mount it on; the variables point there.
			m = append(m, specs.Mount{Destination: egress.CABundlePath, Type: "bind", Source: opts.CABundleSource, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		}
	}
	return m
}

// cpuPeriod is the CFS period; the quota is CPUs times it.
const cpuPeriod = 100000

func buildResources(lim runtime.Limits, swap bool) *specs.LinuxResources {
	mem := lim.MemoryBytes
	pids := lim.Pids
	quota := int64(lim.CPUs * cpuPeriod)
	if quota < 1000 {
		quota = 1000 // the kernel's minimum quota is 1ms
	}
	period := uint64(cpuPeriod)
	deny := false
	r := &specs.LinuxResources{
		// Deny every device node; runc still creates its small default set
		// (null, zero, full, random, urandom, tty) and allows just those.
		Devices: []specs.LinuxDeviceCgroup{{Allow: deny, Access: "rwm"}},
		Memory:  &specs.LinuxMemory{Limit: &mem},
		Pids:    &specs.LinuxPids{Limit: &pids},
		CPU:     &specs.LinuxCPU{Quota: &quota, Period: &period},
	}
	if swap {
		total := mem
		r.Memory.Swap = &total
	}
	return r
}

// DefaultUserNSBase is the first host uid/gid of the range runc containers
// are mapped to: far above the ranges /etc/subuid hands out (100000+) and
// regular users, below the 32-bit limit.
const DefaultUserNSBase = 1 << 30

// UserNSSize covers the container's root and nobody (65534).
const UserNSSize = 65536
