package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// scan lists and hashes every entry under dir but the manifest: what a
// manifest's Files record and what Load compares them with. Device files
// and sockets have no place in a checkpoint (CopyTree leaves them out), so
// one found is an error naming it. total is the sum of the entries'
// sizes; disk counts a file with several names once (the disk the
// checkpoint takes).
func scan(dir string) (files []File, total, disk int64, err error) {
	l, err := list(dir)
	if err != nil {
		return nil, 0, 0, err
	}
	if err := l.hash(dir); err != nil {
		return nil, 0, 0, err
	}
	return l.files, l.total, l.disk, nil
}

// listing is scan's first half: every entry with its size, no digest of
// a file yet (so a checkpoint too big for its budget is refused before
// its bytes are read).
type listing struct {
	files       []File
	inodes      []devIno // of each file, for hashing a linked file once
	nlinks      []uint64
	total, disk int64
}

func list(dir string) (*listing, error) {
	l := &listing{}
	seen := map[devIno]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == ManifestName {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := File{Path: rel, Mode: uint32(info.Mode().Perm())}
		if info.Mode()&fs.ModeSetuid != 0 {
			f.Mode |= unix.S_ISUID
		}
		if info.Mode()&fs.ModeSetgid != 0 {
			f.Mode |= unix.S_ISGID
		}
		if info.Mode()&fs.ModeSticky != 0 {
			f.Mode |= unix.S_ISVTX
		}
		var key devIno
		var nlink uint64
		switch t := info.Mode().Type(); {
		case t == 0:
			f.Type, f.Size = TypeFile, info.Size()
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				key, nlink = devIno{uint64(st.Dev), st.Ino}, uint64(st.Nlink)
			}
		case t == fs.ModeDir:
			f.Type = TypeDir
		case t == fs.ModeSymlink:
			f.Type = TypeSymlink
			var target string
			if target, err = os.Readlink(p); err == nil {
				sum := sha256.Sum256([]byte(target))
				f.Size, f.SHA256 = int64(len(target)), hex.EncodeToString(sum[:])
			}
			f.Mode = 0o777 // a link's own mode means nothing on Linux
		case t == fs.ModeNamedPipe:
			f.Type = TypeFIFO
		default:
			return fmt.Errorf("%s is a %v, which a checkpoint cannot hold", rel, t)
		}
		if err != nil {
			return err
		}
		l.total += f.Size
		if nlink <= 1 || !seen[key] {
			l.disk += f.Size
			if nlink > 1 {
				seen[key] = true
			}
		}
		l.files = append(l.files, f)
		l.inodes = append(l.inodes, key)
		l.nlinks = append(l.nlinks, nlink)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Sort(l)
	return l, nil
}

func (l *listing) Len() int           { return len(l.files) }
func (l *listing) Less(i, j int) bool { return l.files[i].Path < l.files[j].Path }
func (l *listing) Swap(i, j int) {
	l.files[i], l.files[j] = l.files[j], l.files[i]
	l.inodes[i], l.inodes[j] = l.inodes[j], l.inodes[i]
	l.nlinks[i], l.nlinks[j] = l.nlinks[j], l.nlinks[i]
}

// hash fills in the digests of the files, reading a file with several
// names once.
func (l *listing) hash(dir string) error {
	sums := map[devIno]string{}
	for i := range l.files {
		f := &l.files[i]
		if f.Type != TypeFile {
			continue
		}
		if l.nlinks[i] > 1 {
			if sum, ok := sums[l.inodes[i]]; ok {
				f.SHA256 = sum
				continue
			}
		}
		n, sum, err := HashFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return err
		}
		if n != f.Size {
			return fmt.Errorf("%s changed size while it was read (%d bytes, then %d)", f.Path, f.Size, n)
		}
		f.SHA256 = sum
		if l.nlinks[i] > 1 {
			sums[l.inodes[i]] = sum
		}
	}
	return nil
}

// HashFile returns a regular file's size and hex sha256, opening it
// without following a link (scan saw a file there; a link put in its place
// since is an error, not followed).
func HashFile(p string) (int64, string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return 0, "", err
	} else if !st.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%s changed into a %v while it was read", p, st.Mode().Type())
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", p, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
