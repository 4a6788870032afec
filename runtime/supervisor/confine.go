package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Job confinement: with Options.Confine every run and every python worker
// starts in a user namespace of its own that maps only the job's uid and
// gid (the same numbers inside and out), as that uid with no supplementary
// group and no capability, and, with NetNS, in a network namespace of its
// own that has only a loopback device. So a job can neither read the
// supervisor's files nor /proc/<supervisor>/environ|mem|fd, nor signal or
// ptrace it (another uid), nor connect to anything it listens on, TCP or
// abstract unix socket (another network stack). Writing the namespace's
// id maps takes CAP_SETUID and CAP_SETGID and no more: no CAP_SYS_ADMIN,
// which a network namespace outside a user namespace would need. The
// supervisor owns the job's namespace, so it keeps every capability over
// the job (the sweep's SIGKILL needs no CAP_KILL). docs/SECURITY.md ("The
// job under the pod agent") has what was measured under gVisor.

// JobConfinement is how every run is started away from the supervisor.
type JobConfinement struct {
	// UID and GID are the job's ids, outside its user namespace and in
	// it. Neither may be 0 or the supervisor's own: a job of the
	// supervisor's uid could read its files and signal it.
	UID, GID int
	// NetNS gives every job a network namespace of its own, loopback
	// only: a job may serve on 127.0.0.1 for itself but reaches nothing
	// of the supervisor's network, not even its loopback.
	NetNS bool
	// WorkDir, when set, is made the job's (owner UID:GID, the directory
	// itself, not what is in it) when Serve starts: the runs' /work. It
	// takes CAP_CHOWN unless it is the job's already.
	WorkDir string
}

// String says what c does, for errors and logs.
func (c *JobConfinement) String() string {
	s := fmt.Sprintf("uid %d gid %d in a user namespace of its own", c.UID, c.GID)
	if c.NetNS {
		s += " with a loopback-only network namespace"
	}
	return s
}

// Validate checks c against the supervisor's own ids.
func (c *JobConfinement) Validate(selfUID, selfGID int) error {
	switch {
	case c.UID <= 0 || c.UID > 1<<31-2:
		return fmt.Errorf("job confinement: uid %d: must be a uid other than root's (1 to 2147483646)", c.UID)
	case c.GID <= 0 || c.GID > 1<<31-2:
		return fmt.Errorf("job confinement: gid %d: must be a gid other than root's (1 to 2147483646)", c.GID)
	case c.UID == selfUID:
		return fmt.Errorf("job confinement: uid %d is the supervisor's own: a job of its uid could read its files and signal it", c.UID)
	case c.GID == selfGID:
		return fmt.Errorf("job confinement: gid %d is the supervisor's own group", c.GID)
	case c.WorkDir != "" && (!filepath.IsAbs(c.WorkDir) || filepath.Clean(c.WorkDir) != c.WorkDir):
		return fmt.Errorf("job confinement: work dir %q: must be a clean absolute path", c.WorkDir)
	}
	return nil
}

// sysProcAttr is how a confined process is started: in a session of its
// own, as for every run.
func (c *JobConfinement) sysProcAttr() *syscall.SysProcAttr {
	flags := uintptr(syscall.CLONE_NEWUSER)
	if c.NetNS {
		flags |= syscall.CLONE_NEWNET
	}
	return &syscall.SysProcAttr{
		Setsid:      true,
		Cloneflags:  flags,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: c.UID, HostID: c.UID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: c.GID, HostID: c.GID, Size: 1}},
		// Allowed, so that the child's setgroups drops the supervisor's
		// supplementary groups (denied, it would keep them).
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: uint32(c.UID), Gid: uint32(c.GID), Groups: []uint32{}},
	}
}

// sysProcAttr is how s starts a run or a worker.
func (s *server) sysProcAttr() *syscall.SysProcAttr {
	if c := s.opts.Confine; c != nil {
		return c.sysProcAttr()
	}
	return &syscall.SysProcAttr{Setsid: true}
}

// probePath is a file that cannot exist (procfs makes none): a probe's
// exec of it fails with ENOENT after every step of the confinement
// succeeded, and any other error is the step that failed.
const probePath = "/proc/self/skillbox-confinement-probe"

// Check starts a process confined as c would start a job, stopping it at
// its exec, and says why the kernel refused, if it did: there is no
// weaker fallback, a supervisor whose confinement does not work serves no
// run. It validates c first.
func (c *JobConfinement) Check() error {
	if err := c.Validate(os.Geteuid(), os.Getegid()); err != nil {
		return err
	}
	userOnly := *c
	userOnly.NetNS = false
	if err := probe(userOnly.sysProcAttr()); err != nil {
		return fmt.Errorf("job confinement: the kernel refused to start a process as uid %d gid %d in a user namespace of its own: %w%s", c.UID, c.GID, err, capsHint())
	}
	if c.NetNS {
		if err := probe(c.sysProcAttr()); err != nil {
			return fmt.Errorf("job confinement: the kernel refused a network namespace inside the job's user namespace: %w", err)
		}
	}
	return nil
}

func probe(attr *syscall.SysProcAttr) error {
	_, err := syscall.ForkExec(probePath, []string{probePath}, &syscall.ProcAttr{Env: []string{}, Sys: attr})
	if errors.Is(err, syscall.ENOENT) {
		return nil // exec'd as far as the missing file: confined
	}
	if err == nil {
		return errors.New("the probe ran a program that should not exist: " + probePath)
	}
	return err
}

// capsHint names the capabilities confinement needs that the supervisor
// lacks.
func capsHint() string {
	eff, err := effectiveCaps()
	if err != nil {
		return " (it needs CAP_SETUID and CAP_SETGID)"
	}
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
	}{{unix.CAP_SETUID, "CAP_SETUID"}, {unix.CAP_SETGID, "CAP_SETGID"}} {
		if eff&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) == 0 {
		return " (the supervisor has CAP_SETUID and CAP_SETGID: the kernel does not allow user namespaces here)"
	}
	return " (the supervisor lacks " + strings.Join(missing, " and ") + ", which writing the namespace's id maps needs)"
}

// effectiveCaps is the supervisor's effective capability set.
func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// ownWorkDir makes c.WorkDir the job's.
func (c *JobConfinement) ownWorkDir() error {
	if c.WorkDir == "" {
		return nil
	}
	fi, err := os.Lstat(c.WorkDir)
	if err != nil {
		return fmt.Errorf("job confinement: work dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return fmt.Errorf("job confinement: work dir %s: not a directory", c.WorkDir)
	}
	if int(st.Uid) == c.UID && int(st.Gid) == c.GID {
		return nil
	}
	if err := os.Lchown(c.WorkDir, c.UID, c.GID); err != nil {
		return fmt.Errorf("job confinement: make work dir %s the job's (needs CAP_CHOWN): %w", c.WorkDir, err)
	}
	return nil
}

// startError says why a run did not start; a confined one may also have
// been refused its confinement or, as the job's uid, its program or
// working directory.
func (s *server) startError(name, path string, err error) error {
	c := s.opts.Confine
	if c == nil {
		return startError(name, path, err)
	}
	switch {
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: permission denied for the job's uid %d (not executable by it, its working directory closed to it, or a noexec mount)", path, c.UID)
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EUSERS):
		return fmt.Errorf("start %s confined (%s): %w", name, c, err)
	}
	return startError(name, path, err)
}

// openLog opens a background run's log for appending, to be its stdout
// and stderr; log is clean, absolute and under the runs directory
// (checkLog).
func (s *server) openLog(log string) (*os.File, error) {
	if c := s.opts.Confine; c != nil {
		return c.openLog(log)
	}
	if err := os.MkdirAll(filepath.Dir(log), 0o700); err != nil {
		return nil, fmt.Errorf("background log directory: %w", err)
	}
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("background log: %w", err)
	}
	return f, nil
}

// openLog opens log in a tree the job may change under the supervisor
// (the log is in its /work): never through a link, never a file that is
// not the job's own or that has another name (a hard link to a file of
// the supervisor's), never blocking on a FIFO. What it makes, directories
// and the log, is the job's, 0700 and 0600, as the job would have made it.
func (c *JobConfinement) openLog(log string) (*os.File, error) {
	dir, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("background log: %w", err)
	}
	defer func() { unix.Close(dir) }()
	parts := strings.Split(strings.TrimPrefix(log, "/"), "/")
	for _, name := range parts[:len(parts)-1] {
		made := false
		if err := unix.Mkdirat(dir, name, 0o700); err == nil {
			made = true
		} else if !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("background log directory %s: %w%s", log, err, dacHint(err))
		}
		next, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("background log directory %s: %s: %w (a link is not followed)", log, name, err)
		}
		unix.Close(dir)
		dir = next
		if made {
			if err := c.chownMade(dir); err != nil {
				return nil, fmt.Errorf("background log directory %s: %w", log, err)
			}
		}
	}
	base := parts[len(parts)-1]
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	made := true
	fd, err := unix.Openat(dir, base, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
	if errors.Is(err, unix.EEXIST) {
		made = false
		fd, err = unix.Openat(dir, base, flags, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("background log %s: %w%s", log, err, dacHint(err))
	}
	f := os.NewFile(uintptr(fd), log)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("background log %s: %w", log, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || (!made && int(st.Uid) != c.UID) {
		f.Close()
		return nil, fmt.Errorf("background log %s: exists and is not the job's own file (a regular file of uid %d with one name)", log, c.UID)
	}
	if made {
		if err := c.chownMade(fd); err != nil {
			f.Close()
			return nil, fmt.Errorf("background log %s: %w", log, err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_APPEND); err != nil {
		f.Close()
		return nil, fmt.Errorf("background log %s: %w", log, err)
	}
	return f, nil
}

// chownMade gives what the supervisor just made to the job.
func (c *JobConfinement) chownMade(fd int) error {
	if err := unix.Fchown(fd, c.UID, c.GID); err != nil {
		return fmt.Errorf("make it the job's (needs CAP_CHOWN): %w", err)
	}
	return nil
}

// dacHint explains a supervisor refused its job's directory.
func dacHint(err error) string {
	if errors.Is(err, unix.EACCES) {
		return " (the job's /work is the job's: writing in it takes CAP_DAC_OVERRIDE)"
	}
	return ""
}
