package deps

import (
	"path"
	"regexp"
	"sort"
	"strings"
)

// lineSuffixRE is the ":12" a declaration's source ends with.
var lineSuffixRE = regexp.MustCompile(`:[0-9]+$`)

// Declared packages that nothing imports. Skills often ship a
// requirements.txt that lists their test tooling (pytest-cov, pytest-mock)
// beside what their scripts use; a person running a script never installs
// those. Without a package source such a declaration could only block every
// run, so packages of an ecosystem with no source that no script imports
// are left out with a note instead (Unused). With a source nothing changes:
// what a skill declares is installed.

// Imports are the modules a skill's scripts import, as the static scan
// behind Check reads them: Python top-level module names and Node package
// names. Test code (tests/ and test/ directories, test_*.py, *_test.py,
// conftest.py, *.test.js, *.spec.js, __tests__/) does not count: it is not
// what a run of the skill starts.
type Imports struct {
	Python map[string]bool
	Node   map[string]bool
}

// ScanImports reads what the scripts under root import (at most
// maxScanFiles files, links not followed).
func ScanImports(root string) (*Imports, error) {
	imp := &Imports{Python: map[string]bool{}, Node: map[string]bool{}}
	err := walkFiles(root, "", func(rel string, data []byte) error {
		fam := familyOf(rel, data)
		if (fam != "python" && fam != "node") || isTestFile(rel) {
			return nil
		}
		scanFile(fam, data, func(_ int, kind, name string) {
			switch {
			case kind != KindImport:
			case fam == "python":
				imp.Python[name] = true
			default:
				imp.Node[nodePackage(strings.TrimPrefix(name, "node:"))] = true
			}
		})
		return nil
	})
	return imp, err
}

// isTestFile reports whether rel (slashes, relative to the skill root) is
// test code by the usual Python and Node conventions.
func isTestFile(rel string) bool {
	dir, base := path.Split(rel)
	for _, d := range strings.Split(strings.Trim(dir, "/"), "/") {
		if d == "tests" || d == "test" || d == "__tests__" {
			return true
		}
	}
	switch {
	case base == "conftest.py", strings.HasPrefix(base, "test_") && strings.HasSuffix(base, ".py"),
		strings.HasSuffix(base, "_test.py"):
		return true
	}
	for _, suf := range []string{".test.js", ".spec.js", ".test.mjs", ".spec.mjs", ".test.cjs", ".spec.cjs"} {
		if strings.HasSuffix(base, suf) {
			return true
		}
	}
	return false
}

// ImportsPython reports whether a script imports distribution dist's module.
func (imp *Imports) ImportsPython(dist string) bool {
	return imp != nil && imp.Python[ModuleOf(dist)]
}

// Unused splits s for a run when src lacks an ecosystem's source: the
// packages of such an ecosystem that no script imports (imp) are left out
// of kept, and notes names them by declaring file ("requirements.txt
// declares pytest-cov, pytest-mock, which no script imports and no package
// source is configured: not installed"). Packages of an ecosystem with a
// source, and imported ones, stay in kept: the first are installed, the
// second still fail the run with MissingSourceError when the image lacks
// them. kept is nil when nothing is left.
func Unused(s *Set, imp *Imports, src Sources) (kept *Set, notes []string) {
	if s.Empty() {
		return nil, nil
	}
	out := *s
	out.Python, out.Npm = nil, nil
	byFile := map[string][]string{}
	var files []string
	drop := func(source, name string) {
		file := lineSuffixRE.ReplaceAllString(source, "")
		if file == "" {
			file = "the config"
		}
		if byFile[file] == nil {
			files = append(files, file)
		}
		byFile[file] = append(byFile[file], name)
	}
	for _, r := range s.Python {
		if !src.Python() && !imp.ImportsPython(r.Name) {
			drop(r.Source, r.Name)
			continue
		}
		out.Python = append(out.Python, r)
	}
	for _, d := range s.Npm {
		if src.NpmRegistry == "" && (imp == nil || !imp.Node[d.Name]) {
			drop(d.Source, d.Name)
			continue
		}
		out.Npm = append(out.Npm, d)
	}
	if len(out.Npm) == 0 {
		out.NpmLock, out.NpmLockSHA256 = nil, ""
	}
	sort.Strings(files)
	for _, f := range files {
		notes = append(notes, f+" declares "+strings.Join(byFile[f], ", ")+
			", which no script imports and no package source is configured: not installed")
	}
	if out.Empty() {
		return nil, notes
	}
	return &out, notes
}
