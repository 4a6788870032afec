package deps

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/Masterminds/semver/v3"
	pep440 "github.com/aquasecurity/go-pep440-version"
)

// Image is what an interpreter image already provides, read from its
// unpacked rootfs: Python distributions (dist-info/egg-info names) and
// version, node modules, and what a wheel needs to match (glibc, arch).
type Image struct {
	Root          string
	PythonVersion string            // "3.13"; "" when the image has no python3
	Dists         map[string]string // normalised name → version
	NodeModules   map[string]string // name → version
	Glibc         string            // "2.41"
	HasPip        bool              // python3 -m pip works in the image
	HasNode       bool
}

var (
	distRE  = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._]*?)-([0-9][^-]*?)(-py[0-9.]+)?\.(dist-info|egg-info)$`)
	pyverRE = regexp.MustCompile(`^python(3\.[0-9]+)$`)
)

// Inspect reads what the image rooted at root provides.
func Inspect(root string) *Image {
	im := &Image{Root: root, Dists: map[string]string{}, NodeModules: map[string]string{}}
	if entries, err := os.ReadDir(filepath.Join(root, "usr/lib")); err == nil {
		for _, e := range entries {
			if m := pyverRE.FindStringSubmatch(e.Name()); m != nil {
				if _, err := os.Stat(filepath.Join(root, "usr/bin", e.Name())); err == nil {
					im.PythonVersion = m[1]
				}
			}
		}
	}
	for _, d := range im.PythonPaths() {
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if m := distRE.FindStringSubmatch(e.Name()); m != nil {
				im.Dists[NormalizeName(m[1])] = m[2]
			}
			if e.Name() == "pip" {
				im.HasPip = true
			}
		}
	}
	for _, d := range []string{"usr/share/nodejs", "usr/lib/nodejs", "usr/local/lib/node_modules"} {
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			continue
		}
		for _, e := range entries {
			names := []string{e.Name()}
			if strings.HasPrefix(e.Name(), "@") {
				names = nil
				sub, _ := os.ReadDir(filepath.Join(root, d, e.Name()))
				for _, s := range sub {
					names = append(names, e.Name()+"/"+s.Name())
				}
			}
			for _, n := range names {
				var pj struct {
					Version string `json:"version"`
				}
				b, err := os.ReadFile(filepath.Join(root, d, n, "package.json"))
				if err != nil {
					continue
				}
				_ = json.Unmarshal(b, &pj)
				im.NodeModules[n] = pj.Version
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/node")); err == nil {
		im.HasNode = true
	}
	im.Glibc = dpkgVersion(root, "libc6")
	return im
}

// PythonPaths are the image's site directories, relative to its root.
func (im *Image) PythonPaths() []string {
	if im.PythonVersion == "" {
		return nil
	}
	v := im.PythonVersion
	return []string{"usr/lib/python3/dist-packages", "usr/lib/python" + v + "/site-packages",
		"usr/local/lib/python" + v + "/dist-packages", "usr/lib/python" + v + "/dist-packages"}
}

// dpkgVersion reads pkg's upstream version ("2.41") from the image's dpkg status.
func dpkgVersion(root, pkg string) string {
	f, err := os.Open(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	in := false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "":
			in = false
		case strings.HasPrefix(l, "Package: "):
			in = strings.TrimPrefix(l, "Package: ") == pkg
		case in && strings.HasPrefix(l, "Version: "):
			v := strings.TrimPrefix(l, "Version: ")
			if i := strings.IndexByte(v, ':'); i >= 0 {
				v = v[i+1:]
			}
			v, _, _ = strings.Cut(v, "-")
			return v
		}
	}
	return ""
}

// SatisfiesPython reports whether the image already provides r: the
// distribution is there and its version meets r's specifiers. A marker or
// extras make the answer "no" (pip decides those).
func (im *Image) SatisfiesPython(r Requirement) bool {
	have, ok := im.Dists[r.Name]
	if !ok || r.Marker() != "" || r.Extras() || len(r.Hashes) > 0 {
		return false
	}
	spec := r.Specifiers()
	if spec == "" {
		return true
	}
	v, err := pep440.Parse(have)
	if err != nil {
		return false
	}
	ss, err := pep440.NewSpecifiers(spec)
	if err != nil {
		return false
	}
	return ss.Check(v)
}

// SatisfiesNpm reports whether the image provides d in a matching version.
func (im *Image) SatisfiesNpm(d NpmDep) bool {
	have, ok := im.NodeModules[d.Name]
	if !ok {
		return false
	}
	if d.Range == "latest" {
		return true
	}
	c, err := semver.NewConstraint(d.Range)
	if err != nil {
		return false
	}
	v, err := semver.NewVersion(have)
	return err == nil && c.Check(v)
}

// Missing returns the part of s the image does not already satisfy (nil
// when the image has everything). A lock file pins npm exactly, so with
// one the npm part is always kept.
func (im *Image) Missing(s *Set) *Set {
	out := &Set{AllowSource: s.AllowSource, NpmLock: s.NpmLock, NpmLockSHA256: s.NpmLockSHA256, Files: s.Files}
	for _, r := range s.Python {
		if !im.SatisfiesPython(r) {
			out.Python = append(out.Python, r)
		}
	}
	for _, d := range s.Npm {
		if s.NpmLock != nil || !im.SatisfiesNpm(d) {
			out.Npm = append(out.Npm, d)
		}
	}
	if len(out.Npm) == 0 {
		out.NpmLock, out.NpmLockSHA256 = nil, ""
	}
	if out.Empty() {
		return nil
	}
	return out
}
