package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// A Bundle is one run's prepared OCI bundle: a directory under the run dir
// holding config.json and the workdir, a tmpfs of Limits.WorkdirBytes with
// the input files already in it. Preparing is separate from starting so that
// a warm pool can prepare and create sandboxes ahead of time and a containerd
// backend can reuse the same spec and workdir handling. Every Bundle must be
// Removed, whatever happens to the container.
type Bundle struct {
	ID      string
	Dir     string // RunDir/<id>: config.json lives here
	Workdir string // Dir/work: the host side of /work
	Spec    *specs.Spec
	Limits  runtime.Limits // with defaults applied
	// OwnerUID/OwnerGID are the host IDs that the container's user has
	// (nobody, 65534, or its mapping in a user namespace; in a rootless
	// sandbox 0, the user); workdir files belong to it.
	OwnerUID, OwnerGID int
	mounted            bool
	lock               *os.File // the run dir, flocked while the run lives
	// inputs records what writeInputs put in the workdir, so that
	// CollectOutputs returns only what the script created or changed.
	inputs inputManifest
}

// Names inside a bundle directory.
const (
	bundleConfig  = "config.json"
	BundleWorkdir = "work"
	BundleHosts   = "hosts"
	// bundleWatchdogLog is where a run's watchdog says what it did; Sweep
	// logs it when it removes the run dir.
	BundleWatchdogLog = "watchdog.log"
	// workdirInodes caps the number of files in /work, so a script cannot
	// use the tmpfs to pin kernel memory with millions of empty files.
	workdirInodes = 65536
)

// PrepareBundle makes RunDir/<job.ID>: mounts the workdir tmpfs, writes the
// inputs in (owned by the container user), creates outputs/, writes the
// hosts file, and writes config.json built by BuildSpec. opts.WorkdirSource
// and opts.HostsSource are filled in here. The image must have an
// /etc/hosts file to mount the hosts file on. On error nothing is left
// behind. Needs root (mount).
func PrepareBundle(job runtime.Job, runDir string, opts SpecOptions) (b *Bundle, err error) {
	if err := runtime.ValidateJob(job); err != nil {
		return nil, err
	}
	b, err = createBundle(job.Sandbox.ID, job.Sandbox.RootFS, job.Limits(), runDir, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = b.Remove()
		}
	}()
	if err := b.writeInputs(job.Invocation.Files); err != nil {
		return b, err
	}
	if err := b.writeConfig(job, opts); err != nil {
		return b, err
	}
	return b, nil
}

// createBundle makes the parts of a bundle known before a job arrives: the
// locked run dir, the workdir tmpfs (empty) and the hosts file. On error
// nothing is left behind.
func createBundle(id, rootfs string, limits runtime.Limits, runDir string, opts SpecOptions) (b *Bundle, err error) {
	if !runtime.IsCleanAbs(runDir) {
		return nil, errkind.Errorf(runtime.ErrInvalidJob, "run dir %q must be an absolute, clean path", runDir)
	}
	if rootfs != "" { // "": a registry image's snapshot, made by containerd
		if err := checkHostsMountPoint(rootfs); err != nil {
			return nil, err
		}
	}
	if err := MakePrivateDir(runDir, "run dir"); err != nil {
		return nil, err
	}
	// The lock tells Sweep (in another process, after a crash) that this
	// run dir is alive; the kernel drops it if we die. The dir is never
	// visible without it (see MakeRunDir).
	dir := filepath.Join(runDir, id)
	lock, err := MakeRunDir(runDir, id)
	if err != nil {
		return nil, err
	}
	uid, gid := runtime.ContainerUID, runtime.ContainerGID
	if opts.Rootless {
		uid, gid = 0, 0 // the script's uid in a rootless sandbox: the user
	} else if opts.UserNS != nil {
		uid = int(opts.UserNS.HostUID) + runtime.ContainerUID
		gid = int(opts.UserNS.HostGID) + runtime.ContainerGID
	}
	b = &Bundle{
		ID:       id,
		Dir:      dir,
		Workdir:  filepath.Join(dir, BundleWorkdir),
		Limits:   limits.WithDefaults(),
		OwnerUID: uid,
		OwnerGID: gid,
		lock:     lock,
	}
	defer func() {
		if err != nil {
			_ = b.Remove()
		}
	}()

	if err := os.Mkdir(b.Workdir, 0o700); err != nil {
		return b, fmt.Errorf("make workdir: %w", err)
	}
	// 0700: the script owns /work and may open it up; the closed run dir
	// above it is what keeps host users out, this is one more layer.
	data := "size=" + strconv.FormatInt(b.Limits.WorkdirBytes, 10) +
		",nr_inodes=" + strconv.Itoa(workdirInodes) +
		",mode=0700,uid=" + strconv.Itoa(uid) + ",gid=" + strconv.Itoa(gid)
	if err := unix.Mount("tmpfs", b.Workdir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return b, fmt.Errorf("mount workdir tmpfs on %s: %w", b.Workdir, err)
	}
	b.mounted = true
	hosts := filepath.Join(dir, BundleHosts)
	if err := os.WriteFile(hosts, []byte(hostsFile), 0o644); err != nil {
		return b, fmt.Errorf("write hosts file: %w", err)
	}
	return b, nil
}

// writeConfig writes config.json for job, with the bundle's workdir and
// hosts file.
func (b *Bundle) writeConfig(job runtime.Job, opts SpecOptions) error {
	opts.WorkdirSource = b.Workdir
	opts.HostsSource = filepath.Join(b.Dir, BundleHosts)
	var err error
	if opts.SkillsSource, err = prepareSkillsDir(b.Dir, job); err != nil {
		return err
	}
	spec, err := BuildSpec(job, opts)
	if err != nil {
		return err
	}
	b.Spec = spec
	return b.WriteJSON(bundleConfig, spec)
}

// WriteJSON writes v as name in the bundle dir, 0600: specs hold the
// job's environment, which may carry secrets.
func (b *Bundle) WriteJSON(name string, v any) error {
	raw, err := json.MarshalIndent(v, "", "\t")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.Dir, name), raw, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// hostsFile is the sandbox's /etc/hosts: localhost and the container's
// hostname on loopback, so a script can serve on localhost and reach itself.
const hostsFile = "127.0.0.1\tlocalhost " + Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"

// checkHostsMountPoint makes sure the read-only rootfs has the /etc/hosts
// file the generated one is mounted on: a runtime cannot create it there,
// and running without it would leave localhost unresolvable.
func checkHostsMountPoint(rootfs string) error {
	p := filepath.Join(rootfs, "etc", "hosts")
	st, err := os.Lstat(p)
	if errors.Is(err, os.ErrPermission) {
		return errkind.Errorf(runtime.ErrUnavailable, "the image at %s cannot be read by this user (%v): an image store must be readable by whoever runs skillbox (every directory down to the image 0755, as `skillbox images build` makes them), or use a store of your own with --images DIR", rootfs, err)
	}
	if err != nil || !st.Mode().IsRegular() {
		return errkind.Errorf(runtime.ErrUnavailable, "the image at %s has no regular file /etc/hosts to mount the sandbox's hosts file on: rebuild the image with this skillbox (skillbox images build NAME)", rootfs)
	}
	return nil
}

// writeInputs puts the input entries and an empty outputs/ in the workdir,
// owned by the container user so the script can change or remove them, and
// records what it wrote in b.inputs.
func (b *Bundle) writeInputs(files []runtime.InputFile) error {
	wd, err := unix.Open(b.Workdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workdir: %w", err)
	}
	defer unix.Close(wd)
	w := &inputWriter{wd: wd, uid: b.OwnerUID, gid: b.OwnerGID, lastFD: -1, manifest: make(inputManifest, len(files))}
	defer w.close()
	for i := range files {
		if err := w.write(&files[i]); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return errkind.Errorf(runtime.ErrInvalidJob, "the inputs do not fit in the workdir (%d bytes, %d files) at %s", b.Limits.WorkdirBytes, workdirInodes, runtime.QuoteName(files[i].Name))
			}
			return err
		}
	}
	out := filepath.Base(runtime.OutputsDir)
	if _, given := w.manifest[out]; !given {
		fd, err := w.mkdirOpen(wd, out, 0o755, false)
		if err != nil {
			return fmt.Errorf("make outputs dir: %w", err)
		}
		unix.Close(fd)
		w.manifest[out] = &inputRecord{kind: runtime.InputDir}
	}
	b.inputs = w.manifest
	return nil
}

// ConfigPath is the bundle's config.json.
func (b *Bundle) ConfigPath() string { return filepath.Join(b.Dir, bundleConfig) }

// Remove unmounts the workdir and deletes the bundle directory. It is safe to
// call more than once. The workdir is detached lazily if a plain unmount
// fails (e.g. a runtime still holds it), so the directory can go anyway.
func (b *Bundle) Remove() error {
	var errs []error
	if b.mounted {
		if err := Unmount(b.Workdir); err != nil {
			errs = append(errs, err)
		} else {
			b.mounted = false
		}
	}
	if !b.mounted {
		if err := os.RemoveAll(b.Dir); err != nil {
			errs = append(errs, fmt.Errorf("remove bundle: %w", err))
		} else if b.lock != nil {
			_ = b.lock.Close()
			b.lock = nil
		}
	}
	return errors.Join(errs...)
}

// Who may reach a run's files on the host. A run dir holds the inputs, the
// workdir with the script's outputs, config.json (the job's environment)
// and the logs, and its id is in every process list (the runtime CLI's
// --bundle, the shim's -id, the watchdog's arguments): so RunDir itself and
// every run dir in it are root's alone, 0700. No runtime needs more: runsc
// and its gofer, the shims and the watchdog run as root, and runc, in a
// user namespace, opens its bind mount sources as root on the host before
// it enters that namespace (runc >= 1.1). What the container reads inside
// (hosts file, skills dir, egress files) keeps its own readable mode: the
// run dir above it is the gate. The script cannot widen this: it owns
// nothing above /work.
const (
	RunDirMode     os.FileMode = 0o700 // RunDir and RunDir/<id>
	RunDirsParents os.FileMode = 0o711 // parents RunDir makes, e.g. /run/skillbox (the socket's dir)
)

// MakePrivateDir makes dir (and any missing parent, RunDirsParents) and
// makes sure that it is a directory of this process's user with mode
// RunDirMode: one made by an older skillbox (0711) is closed, one that is
// a link or someone else's is refused. what names it in errors.
func MakePrivateDir(dir, what string) error {
	if err := os.MkdirAll(filepath.Dir(dir), RunDirsParents); err != nil {
		return fmt.Errorf("make %s: %w", what, err)
	}
	if err := os.Mkdir(dir, RunDirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make %s: %w", what, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s %s (it must be a directory, not a link): %w", what, dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s %s: %w", what, dir, err)
	}
	if int(st.Uid) != os.Geteuid() {
		return errkind.Errorf(runtime.ErrUnavailable, "%s %s belongs to uid %d, not to this process's %d: remove it or choose another directory", what, dir, st.Uid, os.Geteuid())
	}
	if os.FileMode(st.Mode&0o7777) != RunDirMode {
		if err := unix.Fchmod(fd, uint32(RunDirMode)); err != nil {
			return fmt.Errorf("close %s %s to other users: %w", what, dir, err)
		}
	}
	return nil
}

// PrepPrefix starts the hidden name under which a run dir is made and
// locked before it is renamed to its id.
const PrepPrefix = ".prep-"

// PrepName is the MkdirTemp pattern of a run dir being made. It carries the
// maker's pid so Sweep leaves the dirs of living makers alone: between mkdir
// and flock such a dir is unlocked, and only a dead maker's is litter.
func PrepName(id string) string {
	return fmt.Sprintf("%s%s-%d-", PrepPrefix, id, os.Getpid())
}

// PrepMakerAlive reports whether the process that made the prep dir name
// still runs (when the name cannot be parsed, it is treated as alive).
func PrepMakerAlive(name string) bool {
	parts := strings.Split(name, "-")
	if len(parts) < 3 {
		return true
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil || pid <= 0 {
		return true
	}
	err = unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// makeRunDirTries bounds how often MakeRunDir starts over because a
// concurrent Sweep removed its unlocked, just-made directory.
const makeRunDirTries = 10

// MakeRunDir makes runDir/id and returns it locked. A run dir must never be
// visible without its lock: Sweep takes an unlocked run dir for a dead run's
// and removes it with its container, mount and cgroup, whatever its age. So
// the dir is made under a hidden temporary name (which Sweep treats apart:
// it only ever removes such a dir empty, holding its lock), locked, and
// only then renamed into place; flock belongs to the open directory and
// survives the rename. A Sweep that removed the temporary dir between its
// mkdir and our lock makes us start over.
func MakeRunDir(runDir, id string) (*os.File, error) {
	dir := filepath.Join(runDir, id)
	for try := 0; try < makeRunDirTries; try++ {
		tmp, err := os.MkdirTemp(runDir, PrepName(id))
		if err != nil {
			return nil, fmt.Errorf("make bundle dir: %w", err)
		}
		lock, err := LockDir(tmp, false)
		if errors.Is(err, os.ErrNotExist) {
			continue // swept before we opened it
		}
		if err != nil {
			_ = unix.Rmdir(tmp)
			return nil, err
		}
		if !SamePath(lock, tmp) {
			lock.Close() // swept while we waited for the lock
			continue
		}
		err = lock.Chmod(RunDirMode)
		if err == nil {
			err = renameNoReplace(tmp, dir)
		}
		if err == nil {
			return lock, nil
		}
		_ = unix.Rmdir(tmp)
		lock.Close()
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return nil, errkind.Errorf(runtime.ErrInvalidJob, "a run with id %q already exists in %s", id, runDir)
		}
		return nil, fmt.Errorf("make bundle dir: %w", err)
	}
	return nil, fmt.Errorf("make bundle dir %s: removed by a concurrent sweep %d times in a row", dir, makeRunDirTries)
}

// SamePath reports whether path still names the directory f has open.
func SamePath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(path)
	return err == nil && os.SameFile(a, b)
}

// renameNoReplace renames oldpath to newpath unless newpath exists (a plain
// rename would replace an empty directory).
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	// A file system without RENAME_NOREPLACE: check, then rename. Run ids
	// are unique, so the check only guards against a caller's mistake.
	if _, err := os.Lstat(newpath); err == nil {
		return unix.EEXIST
	}
	return os.Rename(oldpath, newpath)
}

// LockDir opens dir and takes an exclusive flock on it. With nonBlocking, a
// lock held by someone else is reported as errLocked.
func LockDir(dir string, nonBlocking bool) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	how := unix.LOCK_EX
	if nonBlocking {
		how |= unix.LOCK_NB
	}
	if err := unix.Flock(fd, how); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return os.NewFile(uintptr(fd), dir), nil
}

var ErrLocked = errors.New("in use by a live run")

// Unmount unmounts target, lazily if it is busy; not mounted is not an error.
func Unmount(target string) error {
	err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err2 := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err2 != nil && !errors.Is(err2, unix.EINVAL) {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

// NewSandboxBundle validates spec and makes its bundle (see createBundle):
// the locked run dir, the empty workdir tmpfs and the hosts file. The
// caller must Remove it.
func NewSandboxBundle(spec runtime.SandboxSpec, runDir string, opts SpecOptions) (*Bundle, error) {
	probe := spec.ProcessJob("true")
	if err := runtime.ValidateJob(probe); err != nil {
		return nil, err
	}
	return createBundle(spec.ID, spec.RootFS, spec.Limits, runDir, opts)
}

// WriteInputs puts the job's input entries into the workdir and sets the
// bundle's limits (the output caps CollectOutputs applies) to job's.
func (b *Bundle) WriteInputs(job runtime.Job) error {
	b.Limits = job.Limits()
	return b.writeInputs(job.Invocation.Files)
}

// SpecFor builds the OCI spec of job on this bundle (its workdir, hosts
// file and skills dir as sources) with BuildSpec, and writes it as the
// bundle's config.json.
func (b *Bundle) SpecFor(job runtime.Job, opts SpecOptions) error { return b.writeConfig(job, opts) }
