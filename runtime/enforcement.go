package runtime

import "github.com/skillbox/skillbox/runtime/errkind"

// How a limit is enforced (Result.LimitsEnforcedBy). A backend names, for
// each limit of LimitFields by its HCL name, the mechanism that holds it on
// this host: a caller (and the audit log) can then tell a kernel-enforced
// limit from one skillbox watches, and from one nothing enforces, instead
// of trusting the number in Limits.
const (
	// EnforcedByCgroup: the run's cgroup (memory.max, pids.max, cpu.max).
	EnforcedByCgroup = "cgroup"
	// EnforcedByTmpfs: a size- and inode-capped tmpfs skillbox mounted.
	EnforcedByTmpfs = "tmpfs"
	// EnforcedByGVisor: gVisor's sentry (its tmpfs sizes, its rlimits).
	EnforcedByGVisor = "gvisor"
	// EnforcedByRlimit: a per-sandbox rlimit gVisor's sentry enforces
	// (RLIMIT_NPROC counts the sandbox's tasks; a refused fork is EAGAIN
	// to the script, not a run reason).
	EnforcedByRlimit = "gvisor-rlimit"
	// EnforcedBySkillbox: skillbox itself (its clock, the stream and output
	// caps it applies while reading).
	EnforcedBySkillbox = "skillbox"
	// EnforcedBySkillboxPoll: skillbox samples the sandbox's memory and
	// kills it above the limit (reason oom); it may overshoot by what the
	// script allocates between two samples.
	EnforcedBySkillboxPoll = "skillbox-poll"
	// EnforcedByNone: nothing on this host enforces the limit; the run
	// says so rather than pretend.
	EnforcedByNone = "none"
)

// Enforcement maps each limit's HCL name to its mechanism: the ones skillbox
// always enforces itself (time, streams, outputs, egress) and, from
// sandbox, the backend's for the limits a sandbox holds (memory, pids,
// cpus, workdir, tmp). A sandbox limit sandbox leaves out is EnforcedByNone.
func Enforcement(sandbox map[string]string) map[string]string {
	out := make(map[string]string, len(LimitFields))
	for _, f := range LimitFields {
		switch {
		case !f.Sandbox:
			out[f.HCL] = EnforcedBySkillbox
		case sandbox[f.HCL] != "":
			out[f.HCL] = sandbox[f.HCL]
		default:
			out[f.HCL] = EnforcedByNone
		}
	}
	return out
}

// Unenforced lists, in LimitFields order, the limits by that nothing
// enforces.
func Unenforced(by map[string]string) []string {
	var out []string
	for _, f := range LimitFields {
		if v, ok := by[f.HCL]; ok && v == EnforcedByNone {
			out = append(out, f.HCL)
		}
	}
	return out
}

// RefuseRootless is the error of a backend that cannot run without root
// when Options.Rootless asks it to.
func RefuseRootless(name string) error {
	return errkind.Errorf(ErrUnavailable, "the %s runtime needs root (it makes cgroups and mounts on the host), and skillbox runs as an ordinary user here: use the runsc runtime (--runtime runsc, gVisor rootless), or run skillbox as root", name)
}
