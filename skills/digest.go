package skills

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// MaxSkillEntries bounds how many files and directories one skill may hold,
// so a digest or reload can never walk an unbounded tree.
const MaxSkillEntries = 100_000

// Digest returns "sha256:<hex>" over the whole skill directory: every entry's
// relative path and type, the bytes and executable bit of regular files, and
// the target text of symlinks (never followed). Entries are visited in
// lexical order, so the digest depends only on content, not on the file
// system. It is what approvals and audit records pin a skill version to.
func Digest(dir string) (string, error) {
	h := sha256.New()
	err := walkSkill(dir, func(rel string, fi fs.FileInfo) error {
		return hashEntry(h, dir, rel, fi)
	})
	if err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// fingerprint is a stat-only summary of the directory (names, types, sizes,
// inodes, mtimes and ctimes) plus the list of its directories (dir first).
// If the fingerprint is unchanged the digest is unchanged, so reloads
// re-hash only the skills that were touched, and Watch knows what to watch.
func fingerprint(dir string) (string, []string, error) {
	h := sha256.New()
	dirs := []string{dir}
	var num [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(num[:], v)
		h.Write(num[:])
	}
	err := walkSkill(dir, func(rel string, fi fs.FileInfo) error {
		io.WriteString(h, rel)
		h.Write([]byte{0})
		ino, ctime := changeStamp(fi)
		put(uint64(fi.Mode()))
		put(uint64(fi.Size()))
		put(uint64(fi.ModTime().UnixNano()))
		put(ino)
		put(uint64(ctime))
		if fi.IsDir() {
			dirs = append(dirs, filepath.Join(dir, filepath.FromSlash(rel)))
		}
		return nil
	})
	if err != nil {
		return "", dirs[:1], err
	}
	return hex.EncodeToString(h.Sum(nil)), dirs, nil
}

func hashEntry(h hash.Hash, dir, rel string, fi fs.FileInfo) error {
	mode := fi.Mode()
	switch {
	case mode.IsDir():
		hashDir(h, rel)
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(filepath.Join(dir, rel))
		if err != nil {
			return fmt.Errorf("digest: %w", err)
		}
		hashSymlink(h, rel, target)
	case mode.IsRegular():
		// O_NOFOLLOW and O_NONBLOCK: a file swapped for a link or a FIFO
		// after the walk saw it must not be followed or block the hash.
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("digest: %w", err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("digest: %w", err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("digest: %s changed while hashing; try again", rel)
		}
		hashFileHeader(h, rel, mode, st.Size())
		if _, err := io.CopyN(h, f, st.Size()); err != nil {
			return fmt.Errorf("digest: %s changed while hashing; try again", rel)
		}
	default:
		// FIFOs, sockets, devices: recorded by type, never opened.
		hashOther(h, rel, mode)
	}
	return nil
}

// The digest's framing of each kind of entry; Snapshot writes the same.

func hashDir(h hash.Hash, rel string) { fmt.Fprintf(h, "D\x00%s\x00", rel) }

func hashSymlink(h hash.Hash, rel, target string) {
	fmt.Fprintf(h, "L\x00%s\x00%s\x00", rel, target)
}

// hashFileHeader precedes a regular file's size bytes of content.
func hashFileHeader(h hash.Hash, rel string, mode fs.FileMode, size int64) {
	exec := "-"
	if mode&0o111 != 0 {
		exec = "x"
	}
	fmt.Fprintf(h, "F\x00%s\x00%s\x00%d\x00", rel, exec, size)
}

func hashOther(h hash.Hash, rel string, mode fs.FileMode) {
	fmt.Fprintf(h, "O\x00%s\x00%s\x00", rel, modeName(mode))
}

// walkSkill calls fn for every entry under dir (not dir itself) in lexical
// order, without following symlinks, with slash-separated relative paths.
func walkSkill(dir string, fn func(rel string, fi fs.FileInfo) error) error {
	count := 0
	var walk func(rel string) error
	walk = func(rel string) error {
		entries, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return fmt.Errorf("reading skill directory: %w", err)
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
		for _, e := range entries {
			count++
			if count > MaxSkillEntries {
				return fmt.Errorf("%s: %w: more than %d files and directories in one skill", dir, ErrTooLarge, MaxSkillEntries)
			}
			child := e.Name()
			if rel != "" {
				child = rel + "/" + child
			}
			fi, err := e.Info()
			if err != nil {
				if os.IsNotExist(err) {
					continue // removed while walking
				}
				return fmt.Errorf("reading skill directory: %w", err)
			}
			if err := fn(child, fi); err != nil {
				return err
			}
			if fi.IsDir() {
				if err := walk(child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk("")
}
