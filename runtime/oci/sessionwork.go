package oci

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
)

// A session sandbox's /work outlives its runs, so a run's outputs are not
// "everything in /work" but what changed in it during the run: the state
// before the run (WorkdirState) is compared with the workdir after it
// (CollectChanges), by the same fingerprints the single-use path compares
// its inputs with. The workdir is read while the sandbox lives (background
// runs may still write), so every open stays beneath the workdir and
// follows no link, as on the single-use path.

// inputOther marks a special file (fifo, socket) in a WorkdirState.
const inputOther runtime.InputKind = "other"

// sessionStateName is runtime.SessionStateDir's name in the workdir.
var sessionStateName = path.Base(runtime.SessionStateDir)

// WorkdirState is what a workdir held at one moment.
type WorkdirState struct{ m inputManifest }

// WorkdirState records every entry of the workdir (not the session state
// dir) by its fingerprint.
func (b *Bundle) WorkdirState() (*WorkdirState, error) {
	wd, err := unix.Open(b.Workdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open workdir: %w", err)
	}
	dir := os.NewFile(uintptr(wd), b.Workdir)
	defer dir.Close()
	m := inputManifest{}
	visited := 0
	var walk func(dir *os.File, rel string, depth int)
	walk = func(dir *os.File, rel string, depth int) {
		names, err := dir.Readdirnames(-1)
		if err != nil {
			return
		}
		fd := int(dir.Fd())
		for _, n := range names {
			if rel == "" && n == sessionStateName {
				continue
			}
			if visited++; visited > maxOutputWalk {
				return
			}
			r := n
			if rel != "" {
				r = rel + "/" + n
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				m[r] = &inputRecord{kind: runtime.InputDir}
				if depth+1 >= maxOutputDepth {
					continue
				}
				sfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					continue
				}
				sub := os.NewFile(uintptr(sfd), n)
				walk(sub, r, depth+1)
				sub.Close()
			case unix.S_IFREG:
				// No bytes kept: a file whose fingerprint moved is
				// reported changed (an empty one that stayed empty is
				// not).
				m[r] = &inputRecord{kind: runtime.InputRegular, fp: fingerprintOf(&st)}
			case unix.S_IFLNK:
				buf := make([]byte, unix.PathMax)
				k, err := unix.Readlinkat(fd, n, buf)
				if err == nil {
					m[r] = &inputRecord{kind: runtime.InputSymlink, target: string(buf[:k])}
				}
			default:
				m[r] = &inputRecord{kind: inputOther, fp: fingerprintOf(&st)}
			}
		}
	}
	walk(dir, "", 0)
	return &WorkdirState{m: m}, nil
}

// CollectChanges reads every regular file created or changed in the
// workdir since before (within lim's output caps, as CollectOutputs), and
// names the files and links of before that are gone.
func (b *Bundle) CollectChanges(before *WorkdirState, lim runtime.Limits) (*Outputs, error) {
	lim = lim.WithDefaults()
	wd, err := unix.Open(b.Workdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open workdir: %w", err)
	}
	dir := os.NewFile(uintptr(wd), b.Workdir)
	defer dir.Close()
	c := &collector{lim: lim, inputs: before.m, exclude: sessionStateName}
	c.walkDir(dir, "", 0)
	if c.unlisted > 0 {
		c.out.Skipped = append(c.out.Skipped, fmt.Sprintf("... and %d more entries not collected (only the first %d are named)", c.unlisted, maxSkippedNamed))
	}
	c.out.Deleted = deletedInputs(wd, before.m)
	return &c.out, nil
}

// WriteSessionInputs puts a run's input entries into a live session
// workdir. Unlike a fresh workdir, a path may already hold something from
// an earlier run: a file or link there is replaced (written beside it and
// renamed over it, so that the sandbox never sees half a file), a
// directory is kept. The session state dir cannot be written.
func (b *Bundle) WriteSessionInputs(files []runtime.InputFile) error {
	for _, f := range files {
		if f.Name == sessionStateName || strings.HasPrefix(f.Name, sessionStateName+"/") {
			return fmt.Errorf("input %s: %s is skillbox's in a session's /work: %w", runtime.QuoteName(f.Name), runtime.SessionStateDir, runtime.ErrInvalidJob)
		}
	}
	wd, err := unix.Open(b.Workdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workdir: %w", err)
	}
	defer unix.Close(wd)
	w := &inputWriter{wd: wd, uid: b.OwnerUID, gid: b.OwnerGID, lastFD: -1, manifest: make(inputManifest, len(files))}
	defer w.close()
	for i := range files {
		f := files[i]
		if f.EffectiveKind() == runtime.InputDir {
			if err := w.write(&f); err != nil {
				return err
			}
			continue
		}
		// Written under a new temporary name in the same directory (made
		// with O_EXCL: nothing of the sandbox's is ever overwritten or
		// removed in its place), then renamed over whatever is at the path.
		dirName, base := path.Split(f.Name)
		dfd, err := w.dir(strings.TrimSuffix(dirName, "/"))
		if err != nil {
			return err
		}
		tmp := f
		for try := 0; ; try++ {
			tmp.Name = dirName + ".skillbox-in-" + randomSuffix()
			err = w.write(&tmp)
			if err == nil || !errors.Is(err, unix.EEXIST) || try >= 8 {
				break
			}
		}
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("the inputs do not fit in the session's workdir (%d bytes) at %s: %w", b.Limits.WorkdirBytes, runtime.QuoteName(f.Name), runtime.ErrInvalidJob)
		}
		if err != nil {
			return fmt.Errorf("input %s: %w", runtime.QuoteName(f.Name), err)
		}
		if err := unix.Renameat(dfd, path.Base(tmp.Name), dfd, base); err != nil {
			_ = unix.Unlinkat(dfd, path.Base(tmp.Name), 0)
			return fmt.Errorf("input %s: %w", runtime.QuoteName(f.Name), err)
		}
	}
	return nil
}

// randomSuffix names a temporary input file.
func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
