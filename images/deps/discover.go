package deps

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// NpmDep is one declared npm dependency.
type NpmDep struct {
	Name   string `json:"name"`
	Range  string `json:"range"` // a semver range or "latest"
	Source string `json:"source"`
}

// Set is everything one skill declares, normalised: the same packages
// declared in any order or file give the same Set and the same layer key.
type Set struct {
	Python []Requirement `json:"python,omitempty"`
	Npm    []NpmDep      `json:"npm,omitempty"`
	// NpmLock is the skill's package-lock.json, when it ships one: it then
	// pins what is installed (npm ci semantics).
	NpmLock []byte `json:"-"`
	// NpmLockSHA256 identifies NpmLock in the key.
	NpmLockSHA256 string `json:"npm_lock_sha256,omitempty"`
	// AllowSource says policy allows building from source for this skill.
	AllowSource bool `json:"allow_source,omitempty"`
	// Files are the declaration files that were read ("requirements.txt",
	// "scripts/x.py"), for receipts.
	Files []string `json:"files,omitempty"`
}

// Empty reports whether nothing is declared.
func (s *Set) Empty() bool { return s == nil || len(s.Python) == 0 && len(s.Npm) == 0 }

// Extra is what the config adds for a skill: its packages block and
// whether building from source is allowed.
type Extra struct {
	Python      []string
	Npm         []string
	AllowSource bool
	Where       string // "skillbox.hcl:12", for messages
}

// Discovery caps, so a hostile skill cannot make loading slow.
const (
	maxScanFiles  = 2000
	maxScriptScan = 4 << 20
)

// Discover reads the dependencies skill directory root declares:
// requirements.txt (at the root or in scripts/), PEP 723 blocks in its
// Python scripts, package.json (+ package-lock.json) at the root or in
// scripts/, and extra (the config's packages for the skill). Symbolic links
// are not followed.
func Discover(root string, extra Extra) (*Set, error) {
	s := &Set{AllowSource: extra.AllowSource}
	for _, rel := range []string{"requirements.txt", "scripts/requirements.txt"} {
		data, err := readRegular(root, rel)
		if err != nil {
			return nil, err
		}
		if data == nil {
			continue
		}
		rs, err := ParseRequirements(data, rel)
		if err != nil {
			return nil, err
		}
		s.Python = append(s.Python, rs...)
		s.Files = append(s.Files, rel)
	}
	err := walkFiles(root, "scripts", func(rel string, data []byte) error {
		if !strings.HasSuffix(rel, ".py") || !strings.Contains(string(data), "# /// script") {
			return nil
		}
		rs, err := ParsePEP723(data, rel)
		if err != nil {
			return err
		}
		if len(rs) > 0 {
			s.Python = append(s.Python, rs...)
			s.Files = append(s.Files, rel)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, dir := range []string{"", "scripts"} {
		rel := path.Join(dir, "package.json")
		data, err := readRegular(root, rel)
		if err != nil {
			return nil, err
		}
		if data == nil {
			continue
		}
		ds, err := ParsePackageJSON(data, rel)
		if err != nil {
			return nil, err
		}
		s.Npm = append(s.Npm, ds...)
		s.Files = append(s.Files, rel)
		lock, err := readRegular(root, path.Join(dir, "package-lock.json"))
		if err != nil {
			return nil, err
		}
		if lock != nil && len(ds) > 0 {
			s.NpmLock = lock
			sum := sha256.Sum256(lock)
			s.NpmLockSHA256 = hex.EncodeToString(sum[:])
			s.Files = append(s.Files, path.Join(dir, "package-lock.json"))
		}
	}
	for _, p := range extra.Python {
		r, err := ParseRequirement(p, extra.Where)
		if err != nil {
			return nil, err
		}
		s.Python = append(s.Python, r)
	}
	for _, p := range extra.Npm {
		d, err := ParseNpmSpec(p, extra.Where)
		if err != nil {
			return nil, err
		}
		s.Npm = append(s.Npm, d)
	}
	s.normalise()
	return s, nil
}

// normalise sorts and de-duplicates the set (first source kept).
func (s *Set) normalise() {
	sort.SliceStable(s.Python, func(i, j int) bool { return s.Python[i].Line() < s.Python[j].Line() })
	s.Python = compactBy(s.Python, func(r Requirement) string { return r.Line() })
	sort.SliceStable(s.Npm, func(i, j int) bool {
		return s.Npm[i].Name+"@"+s.Npm[i].Range < s.Npm[j].Name+"@"+s.Npm[j].Range
	})
	s.Npm = compactBy(s.Npm, func(d NpmDep) string { return d.Name + "@" + d.Range })
}

func compactBy[T any](in []T, key func(T) string) []T {
	var out []T
	for i, v := range in {
		if i > 0 && key(in[i-1]) == key(v) {
			continue
		}
		out = append(out, v)
	}
	return out
}

// walkFiles calls fn with every regular file under root/sub (its path
// relative to root, with slashes, and its bytes), skipping hidden
// directories, node_modules and __pycache__, links and special files, and
// stopping after maxScanFiles files. A missing sub is no files.
func walkFiles(root, sub string, fn func(rel string, data []byte) error) error {
	n := 0
	start := filepath.Join(root, filepath.FromSlash(sub))
	return filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			if p != start && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "__pycache__") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if n++; n > maxScanFiles {
			return fs.SkipAll
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		data, err := readRegular(root, rel)
		if err != nil || data == nil {
			return err
		}
		return fn(rel, data)
	})
}

// readRegular reads root/rel if it is a regular file (nil when missing or
// not regular), capped.
func readRegular(root, rel string) ([]byte, error) {
	p := filepath.Join(root, filepath.FromSlash(rel))
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	if fi.Size() > maxScriptScan {
		return nil, errkind.Errorf(ErrInvalid, "%s is larger than %d bytes", rel, maxScriptScan)
	}
	return os.ReadFile(p)
}

var (
	npmNameRE  = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)
	npmRangeRE = regexp.MustCompile(`^[A-Za-z0-9 .*^~<>=|x+-]*$`)
)

// ParsePackageJSON returns the dependencies of a package.json (not the dev
// ones). Ranges must be semver ranges: git URLs, file: and link: specs, tags
// other than latest and aliases are refused.
func ParsePackageJSON(data []byte, file string) ([]NpmDep, error) {
	if len(data) > maxDeclBytes {
		return nil, errkind.Errorf(ErrInvalid, "%s is larger than %d bytes", file, maxDeclBytes)
	}
	var pj struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(data, &pj); err != nil {
		return nil, errkind.Errorf(ErrInvalid, "%s: %w", file, err)
	}
	var out []NpmDep
	for name, rng := range pj.Dependencies {
		d, err := checkNpm(name, rng, file)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ParseNpmSpec parses "name@range" (or a bare name: latest).
func ParseNpmSpec(s, where string) (NpmDep, error) {
	at := strings.LastIndex(s, "@")
	if at <= 0 {
		return checkNpm(s, "latest", where)
	}
	return checkNpm(s[:at], s[at+1:], where)
}

func checkNpm(name, rng, where string) (NpmDep, error) {
	if !npmNameRE.MatchString(name) || len(name) > 214 {
		return NpmDep{}, errkind.Errorf(ErrInvalid, "%s: %q is not an npm package name", where, clip(name))
	}
	rng = strings.TrimSpace(rng)
	if rng == "" || rng == "*" {
		rng = "latest"
	}
	if rng != "latest" && (!npmRangeRE.MatchString(rng) || len(rng) > 200) {
		return NpmDep{}, errkind.Errorf(ErrInvalid, "%s: %s: %q is not a semver range (URLs, git, file: and link: specs are not allowed; the registry comes from the config)", where, name, clip(rng))
	}
	return NpmDep{Name: name, Range: rng, Source: where}, nil
}
