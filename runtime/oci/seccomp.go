package oci

import (
	goruntime "runtime"
	"sort"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The seccomp profile for runc. It is an allowlist in the spirit of the
// Docker/containerd default: what interpreters and ordinary programs need is
// allowed, everything that manages the kernel, namespaces, mounts, keys,
// tracing or other processes' memory fails with EPERM. Anything not named
// here (including syscalls newer than the list) is denied, which is why the
// list is generous with harmless calls: an unexpected EPERM in some library is
// a worse failure than one more read-only syscall.
//
// The container already has no capabilities and no_new_privileges; seccomp
// is the layer that narrows the host kernel's attack surface for runc. runsc
// does not use it: gVisor's sentry implements the syscalls itself and is
// filtered by its own profile on the host.

// Syscalls every container may make. Names unknown to the host's libseccomp
// (other architectures' spellings, very new calls) are ignored by runc.
var seccompAllowed = []string{
	"accept", "accept4", "access", "adjtimex", "alarm", "arch_prctl",
	"bind", "brk",
	"capget", "capset", "chdir", "chmod", "chown", "clock_adjtime", "clock_getres",
	"clock_gettime", "clock_nanosleep", "close", "close_range", "connect", "copy_file_range", "creat",
	"dup", "dup2", "dup3",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait",
	"eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group",
	"faccessat", "faccessat2", "fadvise64", "fallocate", "fchdir", "fchmod", "fchmodat", "fchmodat2",
	"fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork",
	"fremovexattr", "fsetxattr", "fstat", "fstatfs", "fsync", "ftruncate", "futex", "futex_waitv",
	"futimesat",
	"get_robust_list", "get_thread_area", "getcpu", "getcwd", "getdents", "getdents64", "getegid",
	"geteuid", "getgid", "getgroups", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid",
	"getppid", "getpriority", "getrandom", "getresgid", "getresuid", "getrlimit", "getrusage",
	"getsid", "getsockname", "getsockopt", "gettid", "gettimeofday", "getuid", "getxattr",
	"inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch",
	"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_setup", "io_submit",
	"ioctl", "ioprio_get", "ioprio_set",
	"kill",
	"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
	"lchown", "lgetxattr", "link", "linkat", "listen", "listxattr", "llistxattr", "lremovexattr",
	"lseek", "lsetxattr", "lstat",
	"madvise", "membarrier", "memfd_create", "mincore", "mkdir", "mkdirat", "mknod", "mknodat",
	"mlock", "mlock2", "mlockall", "mmap", "mprotect", "mq_getsetattr", "mq_notify", "mq_open",
	"mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap", "msgctl", "msgget", "msgrcv", "msgsnd",
	"msync", "munlock", "munlockall", "munmap",
	"nanosleep", "newfstatat",
	"open", "openat", "openat2",
	"pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free",
	"pkey_mprotect", "poll", "ppoll", "prctl", "pread64", "preadv", "preadv2", "prlimit64",
	"pselect6", "pwrite64", "pwritev", "pwritev2",
	"read", "readahead", "readlink", "readlinkat", "readv", "recvfrom", "recvmmsg", "recvmsg",
	"remap_file_pages", "removexattr", "rename", "renameat", "renameat2", "restart_syscall", "rmdir",
	"rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
	"rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity", "sched_getattr",
	"sched_getparam", "sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity",
	"sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "select",
	"semctl", "semget", "semop", "semtimedop", "sendfile", "sendmmsg", "sendmsg", "sendto",
	"set_robust_list", "set_thread_area", "set_tid_address", "setfsgid", "setfsuid", "setgid",
	"setgroups", "setitimer", "setpgid", "setpriority", "setregid", "setresgid", "setresuid",
	"setreuid", "setrlimit", "setsid", "setsockopt", "setuid", "setxattr", "shmat", "shmctl",
	"shmdt", "shmget", "shutdown", "sigaltstack", "signalfd", "signalfd4", "socketpair", "splice",
	"stat", "statfs", "statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo",
	"tee", "tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
	"timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime", "times", "tkill",
	"truncate",
	"umask", "uname", "unlink", "unlinkat", "utime", "utimensat", "utimes",
	"vfork",
	"wait4", "waitid", "write", "writev",
}

// Flag and argument values used by the conditional rules.
const (
	// CLONE_NEWNS|CLONE_NEWCGROUP|CLONE_NEWUTS|CLONE_NEWIPC|CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNET
	cloneNamespaceFlags = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
	afVsock             = 40
	errnoEPERM          = 1
	errnoENOSYS         = 38
)

// personalities that only change reporting (query, PER_LINUX, UNAME26, and
// PER_LINUX32 variants); the rest toggle things like ADDR_NO_RANDOMIZE.
var allowedPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// DefaultSeccomp returns a fresh copy of the runc seccomp profile for the
// architecture this binary was built for.
func DefaultSeccomp() *specs.LinuxSeccomp {
	return SeccompFor(goruntime.GOARCH)
}

func SeccompFor(goarch string) *specs.LinuxSeccomp {
	eperm := uint(errnoEPERM)
	enosys := uint(errnoENOSYS)
	names := append([]string(nil), seccompAllowed...)
	sort.Strings(names)
	sc := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		// Only the native ABI: 32-bit and x32 syscalls take another path
		// through the kernel and interpreters here never need them.
		Architectures: seccompArches(goarch),
		Syscalls: []specs.LinuxSyscall{
			{Names: names, Action: specs.ActAllow},
			// clone without any namespace flag; the flags are argument 0
			// on x86_64 and arm64.
			{Names: []string{"clone"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
				{Index: 0, Value: cloneNamespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual},
			}},
			// clone3 passes its flags in memory seccomp cannot read; ENOSYS
			// makes glibc fall back to clone, which the rule above checks.
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
			// Sockets of every family except vsock (a path to the hypervisor).
			{Names: []string{"socket"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
				{Index: 0, Value: afVsock, Op: specs.OpNotEqual},
			}},
		},
	}
	for _, p := range allowedPersonalities {
		sc.Syscalls = append(sc.Syscalls, specs.LinuxSyscall{
			Names: []string{"personality"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: p, Op: specs.OpEqualTo}},
		})
	}
	return sc
}

func seccompArches(goarch string) []specs.Arch {
	switch goarch {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64}
	default:
		// Let the runtime use the native architecture.
		return nil
	}
}
