// Package rootless is how an ordinary user runs skillbox's gVisor sandboxes
// without root (skillbox run, exec and a self-contained mcp).
//
// runsc runs rootless by itself, but a run needs more than runsc: its /work
// is a size- and inode-capped tmpfs that skillbox mounts and fills with the
// inputs, and an ordinary user cannot mount. So the command re-executes
// itself once, at its start, in a new user and mount namespace where the
// user is uid 0 (Enter): there it may mount a tmpfs in its own mount
// namespace, and nothing else it could not do before, since the namespace
// maps only the user's own uid and grants nothing over files of other users.
// Every mount dies with the namespace, so a crash leaves none behind. The
// rest of skillbox then sees euid 0 and asks Active whether it is real root
// or this namespace, which decides the runtime's flags, the spec
// (runtime/oci SpecOptions.Rootless) and where state lives (Dirs).
package rootless

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// childEnv marks the re-executed process (Enter), which removes it again.
const childEnv = "SKILLBOX_ROOTLESS_CHILD"

// Active reports whether this process runs as uid 0 of a user namespace
// that is not the host's (Enter's, or a container's): root there, an
// ordinary user outside.
func Active() bool {
	if os.Geteuid() != 0 {
		return false
	}
	m, err := readIDMap("/proc/self/uid_map")
	return err == nil && !m.initial()
}

// HostUID is the uid in the parent namespace that uid 0 of this one is, or
// -1 when uid 0 is not mapped (or the map cannot be read).
func HostUID() int {
	m, err := readIDMap("/proc/self/uid_map")
	if err != nil {
		return -1
	}
	return m.outside(0)
}

// idRange is one line of a uid_map or gid_map.
type idRange struct{ inside, outside, size uint64 }

type idMap []idRange

// initial reports whether m is the initial namespace's: every id maps to
// itself.
func (m idMap) initial() bool {
	return len(m) == 1 && m[0].inside == 0 && m[0].outside == 0 && m[0].size == 4294967295
}

// outside is what id inside maps to, or -1.
func (m idMap) outside(inside uint64) int {
	for _, r := range m {
		if inside >= r.inside && inside-r.inside < r.size {
			return int(r.outside + inside - r.inside)
		}
	}
	return -1
}

func readIDMap(path string) (idMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseIDMap(f)
}

func parseIDMap(f interface{ Read([]byte) (int, error) }) (idMap, error) {
	var m idMap
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		if len(fs) != 3 {
			return nil, fmt.Errorf("id map line %q: want three numbers", sc.Text())
		}
		var r [3]uint64
		for i, s := range fs {
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("id map line %q: %w", sc.Text(), err)
			}
			r[i] = n
		}
		m = append(m, idRange{r[0], r[1], r[2]})
	}
	return m, sc.Err()
}

// ErrNoUserNamespaces is Enter's error when the system does not let an
// ordinary user make a user namespace.
var ErrNoUserNamespaces = errors.New("user namespaces are not available to this user")

// Enter makes the process able to run rootless sandboxes. For root (real,
// or uid 0 of a namespace already) it only makes sure mounts made from now
// on stay in this process's mount namespace, and returns reexeced false.
// For an ordinary user it runs this binary again with the same arguments,
// environment and stdio in a new user and mount namespace, waits for it,
// and returns its exit code with reexeced true: the caller exits with it.
// Signals that ask the process to end (TERM, HUP) are passed on; an
// interrupt from the terminal reaches both processes anyway (the same
// process group), so the outer one ignores it. The inner one dies with the
// outer one (Pdeathsig).
func Enter() (code int, reexeced bool, err error) {
	if os.Geteuid() == 0 {
		if os.Getenv(childEnv) != "" {
			os.Unsetenv(childEnv)
			// Mounts of this namespace must not propagate back into the
			// one it was copied from.
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return 0, false, fmt.Errorf("rootless: make mounts private in the new mount namespace: %w", err)
			}
		}
		return 0, false, nil
	}
	// This very binary, even if the file was replaced since it started.
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	// Pdeathsig fires when the forking thread ends, not the process: the
	// fork happens on a thread locked to the goroutine that waits.
	type end struct {
		state *os.ProcessState
		err   error
	}
	started, ended := make(chan error, 1), make(chan end, 1)
	go func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		ended <- end{cmd.ProcessState, err}
	}()
	if err := <-started; err != nil {
		return 0, false, startError(err)
	}
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case e := <-ended:
			if e.state == nil {
				return 0, true, fmt.Errorf("rootless: %w", e.err)
			}
			if ws, ok := e.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal()), true, nil
			}
			return e.state.ExitCode(), true, nil
		}
	}
}

// startError explains a failed start in a new user namespace: the kernel
// says EPERM, EACCES, ENOSPC or EINVAL, which alone tell a user nothing.
func startError(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) && (errno == unix.EPERM || errno == unix.EACCES || errno == unix.ENOSPC || errno == unix.EINVAL || errno == unix.EUSERS) {
		return fmt.Errorf("%w (%v): skillbox runs without root in a user namespace of its own; check that sysctl user.max_user_namespaces is above 0, kernel.unprivileged_userns_clone is 1 where it exists, and on Ubuntu kernel.apparmor_restrict_unprivileged_userns is 0 (or an AppArmor profile allows skillbox); or run skillbox as root: %w",
			ErrNoUserNamespaces, err, errno)
	}
	return fmt.Errorf("rootless: start skillbox in a user namespace: %w", err)
}

// Dirs is where a rootless skillbox keeps its state: the user's, never
// the system's (/run/skillbox is root's).
type Dirs struct {
	Base string // the user's skillbox state directory
}

// UserDirs picks the user's state directory: $XDG_RUNTIME_DIR/skillbox
// when that directory is set and the user's (a tmpfs that ends with the
// login), else $XDG_STATE_HOME/skillbox, else ~/.local/state/skillbox.
func UserDirs() (Dirs, error) {
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil && int(st.Uid) == os.Geteuid() && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return Dirs{Base: filepath.Join(d, "skillbox")}, nil
		}
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return Dirs{Base: filepath.Join(d, "skillbox")}, nil
	}
	home := os.Getenv("HOME")
	if !filepath.IsAbs(home) {
		return Dirs{}, errors.New("rootless: HOME is not set to an absolute path, so there is no place for skillbox's state: set HOME or XDG_STATE_HOME")
	}
	return Dirs{Base: filepath.Join(home, ".local", "state", "skillbox")}, nil
}

// Runs is the run dir (runtime.Options.RunDir).
func (d Dirs) Runs() string { return filepath.Join(d.Base, "runs") }

// State is a backend's state dir, by name (runsc's --root).
func (d Dirs) State(name string) string { return filepath.Join(d.Base, name) }

// Snapshots holds the read-only copies of skill versions.
func (d Dirs) Snapshots() string { return filepath.Join(d.Base, "snapshots") }
