package skills

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// Snapshot copies the skill directory src into dst, an existing empty
// directory that only the caller can write, and returns the digest (the one
// Digest computes) of exactly the bytes it copied. A run mounts the copy, not
// src: whoever can write src can no longer change, between the check and the
// exec, what a run executes, so comparing the result with the digest a skill
// was loaded (and a run approved) at proves what the run will see.
//
// The source is walked through open directory handles, never following a
// symlink (only src itself may be one, as Digest allows). Directories and
// regular files are recreated with the author's permission bits, owned by
// the caller: the owner's read, write and execute bits as they are (a
// script that copies a template into its working directory gets a copy it
// can edit, and executables stay executable), group and other without
// write, and no setuid, setgid or sticky bit. The copy is protected by
// where it lives and how it is used, not by its modes: its parent is
// private to the caller and runs mount it read-only. Symlinks are recreated
// with the same target text. FIFOs, sockets and devices enter the digest by
// type, as in Digest, but are not copied. The regular files may total at
// most maxBytes (ErrTooLarge); the entry count is bounded as in Digest.
func Snapshot(src, dst string, maxBytes int64) (string, error) {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("snapshot: open skill directory %s: %w", src, err)
	}
	defer unix.Close(sfd)
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("snapshot: open %s: %w", dst, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return "", fmt.Errorf("snapshot: %s: %w", src, err)
	}
	s := &snapshotter{src: src, h: sha256.New(), left: maxBytes}
	if err := s.copyDir(sfd, dfd, ""); err != nil {
		return "", err
	}
	if err := unix.Fchmod(dfd, snapshotPerm(st.Mode)); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	return "sha256:" + hex.EncodeToString(s.h.Sum(nil)), nil
}

type snapshotter struct {
	src   string
	h     hash.Hash
	count int
	left  int64 // bytes of regular files still allowed
}

// snapshotPerm is the mode a copy gets from its source's mode: the
// owner's bits as they are, group and other without write, no special bits.
func snapshotPerm(mode uint32) uint32 { return mode & 0o755 }

// copyDir copies the entries of the open directory sfd into dfd; rel is its
// path relative to the skill ("" for the skill itself).
func (s *snapshotter) copyDir(sfd, dfd int, rel string) error {
	names, err := readDirNames(sfd)
	if err != nil {
		return fmt.Errorf("snapshot: reading %s/%s: %w", s.src, rel, err)
	}
	for _, name := range names {
		s.count++
		if s.count > MaxSkillEntries {
			return fmt.Errorf("%s: %w: more than %d files and directories in one skill", s.src, ErrTooLarge, MaxSkillEntries)
		}
		child := name
		if rel != "" {
			child = rel + "/" + name
		}
		var st unix.Stat_t
		if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed while walking, as in Digest
			}
			return fmt.Errorf("snapshot: %s: %w", child, err)
		}
		if err := s.copyEntry(sfd, dfd, name, child, &st); err != nil {
			return err
		}
	}
	return nil
}

func (s *snapshotter) copyEntry(sfd, dfd int, name, rel string, st *unix.Stat_t) error {
	fail := func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("snapshot: %s: %w", rel, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hashDir(s.h, rel)
		sub, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		defer unix.Close(sub)
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return fail(err)
		}
		dsub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		defer unix.Close(dsub)
		if err := s.copyDir(sub, dsub, rel); err != nil {
			return err
		}
		var now unix.Stat_t
		if err := unix.Fstat(sub, &now); err != nil {
			return fail(err)
		}
		return fail(unix.Fchmod(dsub, snapshotPerm(now.Mode)))
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(sfd, name, buf)
		if err != nil {
			return fail(err)
		}
		target := string(buf[:n])
		hashSymlink(s.h, rel, target)
		return fail(unix.Symlinkat(target, dfd, name))
	case unix.S_IFREG:
		return s.copyFile(sfd, dfd, name, rel, st)
	default:
		hashOther(s.h, rel, fileModeOf(st.Mode))
		return nil
	}
}

// copyFile copies one regular file, hashing what it writes. The exec bit in
// the digest comes from the walk's lstat, as in Digest.
func (s *snapshotter) copyFile(sfd, dfd int, name, rel string, lst *unix.Stat_t) error {
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("snapshot: %s: %w", rel, err)
	}
	src := os.NewFile(uintptr(in), rel)
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return fmt.Errorf("snapshot: %s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("snapshot: %s changed while copying; try again", rel)
	}
	if st.Size > s.left {
		return fmt.Errorf("%s: %w: the skill's files are larger than the %d bytes a run may copy", s.src, ErrTooLarge, s.left)
	}
	s.left -= st.Size
	out, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("snapshot: %s: %w", rel, err)
	}
	dst := os.NewFile(uintptr(out), rel)
	defer dst.Close()
	hashFileHeader(s.h, rel, fileModeOf(lst.Mode), st.Size)
	if _, err := io.CopyN(io.MultiWriter(dst, s.h), src, st.Size); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("snapshot: %s changed while copying; try again", rel)
		}
		return fmt.Errorf("snapshot: %s: %w", rel, err)
	}
	if err := dst.Chmod(fs.FileMode(snapshotPerm(st.Mode))); err != nil {
		return fmt.Errorf("snapshot: %s: %w", rel, err)
	}
	return dst.Close()
}

// readDirNames lists the open directory fd, sorted (Digest's order). It
// reads through a duplicate so fd's own offset is left alone.
func readDirNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(dup), ".")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// fileModeOf converts a stat mode to the fs.FileMode Digest sees.
func fileModeOf(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	return mode
}
