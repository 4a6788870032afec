package deps

import (
	"os"
	"path"
	"path/filepath"
	"sort"
)

// Programs is what an image's PATH holds, read once from its unpacked
// rootfs: the names in its PATH directories (binDirs). Images never change
// after they are unpacked, so one listing per image digest serves every
// later run.
type Programs struct {
	Root  string
	names map[string]bool
}

// ListPrograms lists the PATH directories of the rootfs at root. A PATH
// directory that is a symlink (bin → usr/bin in a merged-/usr image) is
// not followed: its target is listed on its own, and a link never leads
// out of the rootfs.
func ListPrograms(root string) *Programs {
	p := &Programs{Root: root, names: map[string]bool{}}
	for _, d := range binDirs {
		dir := filepath.Join(root, d)
		if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			if e.Type().IsRegular() {
				if fi, err := e.Info(); err != nil || fi.Mode().Perm()&0o111 == 0 {
					continue
				}
			}
			p.names[e.Name()] = true
		}
	}
	return p
}

// Has reports whether a script that starts name (a bare name, or an
// absolute path) finds it in the image.
func (p *Programs) Has(name string) bool {
	if p == nil {
		return false
	}
	if !path.IsAbs(name) {
		return p.names[name]
	}
	clean := path.Clean(name)
	for _, d := range binDirs {
		if path.Dir(clean) == "/"+d {
			return p.names[path.Base(clean)]
		}
	}
	_, err := os.Lstat(filepath.Join(p.Root, filepath.FromSlash(clean)))
	return err == nil
}

// Lacking returns the calls' names that the image does not have, sorted
// and each once.
func (p *Programs) Lacking(calls []ShellCall) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range calls {
		if !seen[c.Name] && !p.Has(c.Name) {
			seen[c.Name] = true
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}
