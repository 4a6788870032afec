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

	"golang.org/x/sys/unix"
)

// scan lists and hashes every entry under dir but the manifest: what a
// manifest's Files record and what Load compares them with. Device files
// and sockets have no place in a checkpoint (CopyTree leaves them out), so
// one found is an error naming it.
func scan(dir string) ([]File, int64, error) {
	var files []File
	var total int64
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
		switch t := info.Mode().Type(); {
		case t == 0:
			f.Type = TypeFile
			f.Size, f.SHA256, err = HashFile(p)
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
		total += f.Size
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, total, nil
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
