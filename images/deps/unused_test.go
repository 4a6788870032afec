package deps

import (
	"slices"
	"testing"
)

func TestScanImportsSkipsTests(t *testing.T) {
	imp, err := ScanImports("testdata/testtools")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		family, name string
		want         bool
	}{
		{"python", "yaml", true},
		{"python", "json", true},
		{"python", "pathlib", true},
		{"python", "pytest", false},      // tests/test_report.py
		{"python", "pytest_mock", false}, // tests/test_report.py
		{"python", "pytest_cov", false},  // conftest.py
		{"node", "left-pad", true},       // a subpath counts as its package
		{"node", "jest", false},          // pad.test.js
	} {
		t.Run(tc.family+" "+tc.name, func(t *testing.T) {
			got := imp.Python[tc.name]
			if tc.family == "node" {
				got = imp.Node[tc.name]
			}
			if got != tc.want {
				t.Errorf("imported = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUnused(t *testing.T) {
	set, err := Discover("testdata/testtools", Extra{})
	if err != nil {
		t.Fatal(err)
	}
	imp, err := ScanImports("testdata/testtools")
	if err != nil {
		t.Fatal(err)
	}
	names := func(s *Set) (py, npm []string) {
		if s == nil {
			return nil, nil
		}
		for _, r := range s.Python {
			py = append(py, r.Name)
		}
		for _, d := range s.Npm {
			npm = append(npm, d.Name)
		}
		return py, npm
	}
	for _, tc := range []struct {
		name      string
		src       Sources
		py, npm   []string
		wantNotes []string
	}{
		{"no source: only what scripts import stays", Sources{}, []string{"pyyaml"}, []string{"left-pad"}, []string{
			"package.json declares jest, which no script imports and no package source is configured: not installed",
			"requirements.txt declares pytest, pytest-cov, pytest-mock, which no script imports and no package source is configured: not installed",
		}},
		{"a python index: python unchanged", Sources{PythonIndex: "http://127.0.0.1:1/simple"},
			[]string{"pytest", "pytest-cov", "pytest-mock", "pyyaml"}, []string{"left-pad"}, []string{
				"package.json declares jest, which no script imports and no package source is configured: not installed",
			}},
		{"both sources: unchanged", Sources{FindLinks: []string{"/w"}, NpmRegistry: "http://127.0.0.1:1"},
			[]string{"pytest", "pytest-cov", "pytest-mock", "pyyaml"}, []string{"jest", "left-pad"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, notes := Unused(set, imp, tc.src)
			py, npm := names(kept)
			if !slices.Equal(py, tc.py) || !slices.Equal(npm, tc.npm) {
				t.Errorf("kept python %v npm %v, want %v %v", py, npm, tc.py, tc.npm)
			}
			if !slices.Equal(notes, tc.wantNotes) {
				t.Errorf("notes:\n%q\nwant\n%q", notes, tc.wantNotes)
			}
		})
	}
	t.Run("nothing imported, no source: nothing kept", func(t *testing.T) {
		s := &Set{Python: []Requirement{{Name: "pytest-cov", Spec: "pytest-cov", Source: "requirements.txt:1"}}}
		kept, notes := Unused(s, &Imports{}, Sources{})
		if kept != nil || len(notes) != 1 {
			t.Errorf("kept %+v, notes %q", kept, notes)
		}
	})
}

// The script reader behind Check and ScanImports reads a skill's files,
// which are untrusted: it must not panic, and every name it reports is
// non-empty.
func FuzzScanFile(f *testing.F) {
	f.Add("python", "import os, sys\nfrom a.b import c\nsubprocess.run(['ls'])\n")
	f.Add("node", "const x = require('@a/b/c');\nimport y from 'z';\nexecSync(`git status`)\n")
	f.Add("python", "#!/usr/bin/env -S python3 -u\nimport\n")
	f.Fuzz(func(t *testing.T, fam, src string) {
		scanFile(fam, []byte(src), func(line int, kind, name string) {
			if name == "" || line < 1 || (kind != KindImport && kind != KindProgram) {
				t.Errorf("line %d %s %q", line, kind, name)
			}
			if kind == KindImport && fam == "node" && nodePackage(name) == "" {
				t.Errorf("node import %q has no package", name)
			}
		})
	})
}
