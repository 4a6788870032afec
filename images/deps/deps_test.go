package deps

import (
	"errors"
	"strings"
	"testing"
)

// wantParsed checks a parser's result: an ErrInvalid mentioning wantErr,
// or the items (as line renders them) want.
func wantParsed[T any](t *testing.T, got []T, err error, wantErr string, want []string, line func(T) string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) || !errors.Is(err, ErrInvalid) {
			t.Fatalf("got %v, want ErrInvalid mentioning %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, v := range got {
		lines = append(lines, line(v))
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q, want %q", lines, want)
	}
}

func TestParseRequirements(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // Line() of each
		err      string
	}{
		{"blank and comments", "\n# x\n  # y\n", nil, ""},
		{"name only", "numpy\n", []string{"numpy"}, ""},
		{"normalised", "Py_YAML [Extra_B, a] >= 6.0 , < 7\n", []string{"py-yaml[a,extra-b]>=6.0,<7"}, ""},
		{"marker", "pillow>=10; python_version >= '3.8'\n", []string{"pillow>=10; python_version >= '3.8'"}, ""},
		{"inline comment", "imageio==2.0 # pinned\n", []string{"imageio==2.0"}, ""},
		{"continuation and hash", "a==1 \\\n  --hash=sha256:" + strings.Repeat("a", 64) + "\n", []string{"a==1 --hash=sha256:" + strings.Repeat("a", 64)}, ""},
		{"index option refused", "--index-url http://evil/simple\n", nil, "requirements.txt:1: option \"--index-url\""},
		{"include refused", "-r other.txt\n", nil, "option \"-r\""},
		{"editable refused", "-e .\n", nil, "option \"-e\""},
		{"url refused", "pkg @ https://x/y.whl\n", nil, "URLs and paths"},
		{"path refused", "./local/pkg\n", nil, "URLs and paths"},
		{"bad hash", "a==1 --hash=md5:abc\n", nil, "write --hash=sha256"},
		{"bad specifier", "a=>1\n", nil, "not understood"},
		{"line number", "ok\n\nbad spec here\n", nil, "requirements.txt:3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := ParseRequirements([]byte(tc.in), "requirements.txt")
			wantParsed(t, rs, err, tc.err, tc.want, Requirement.Line)
		})
	}
}

func TestParsePEP723(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"none", "print(1)\n", nil, ""},
		{"block", "#!/usr/bin/env python3\n# /// script\n# dependencies = [\n#   \"requests<3\",\n#   \"rich\",\n# ]\n# ///\n", []string{"requests<3", "rich"}, ""},
		{"other block type ignored", "# /// pyproject\n# x = 1\n# ///\n", nil, ""},
		{"unclosed", "# /// script\n# dependencies = []\nprint(1)\n", nil, "not closed"},
		{"two blocks", "# /// script\n# ///\n# /// script\n# ///\n", nil, "second"},
		{"bad toml", "# /// script\n# dependencies = [\n# ///\n", nil, "script metadata"},
		{"url refused", "# /// script\n# dependencies = [\"x @ https://h/x.whl\"]\n# ///\n", nil, "URLs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := ParsePEP723([]byte(tc.in), "s.py")
			wantParsed(t, rs, err, tc.err, tc.want, Requirement.Line)
		})
	}
}

func TestParsePackageJSON(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"deps only", `{"dependencies":{"b":"^1","@s/a":"~2.0"},"devDependencies":{"c":"1"}}`, []string{"@s/a@~2.0", "b@^1"}, ""},
		{"star is latest", `{"dependencies":{"a":"*"}}`, []string{"a@latest"}, ""},
		{"git refused", `{"dependencies":{"a":"git+https://x/y.git"}}`, nil, "not a semver range"},
		{"file refused", `{"dependencies":{"a":"file:../a.tgz"}}`, nil, "not a semver range"},
		{"bad name", `{"dependencies":{"../a":"1"}}`, nil, "not an npm package name"},
		{"not json", `{`, nil, "package.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := ParsePackageJSON([]byte(tc.in), "package.json")
			wantParsed(t, ds, err, tc.err, tc.want, func(d NpmDep) string { return d.Name + "@" + d.Range })
		})
	}
}

func TestDiscoverAndKey(t *testing.T) {
	s, err := Discover("testdata/skill", Extra{Python: []string{"numpy"}, Npm: []string{"is-number@7"}, Where: "skillbox.hcl:3"})
	if err != nil {
		t.Fatal(err)
	}
	var py []string
	for _, r := range s.Python {
		py = append(py, r.Line())
	}
	// Pillow is declared in both files with markers quoted differently: two entries.
	want := []string{"numpy", "pillow>=10; python_version >= \"3.8\"", "pillow>=10; python_version >= '3.8'", "pyyaml",
		"tinydep==1.0 --hash=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	if strings.Join(py, "|") != strings.Join(want, "|") {
		t.Errorf("python:\n got %q\nwant %q", py, want)
	}
	if len(s.Npm) != 2 || s.Npm[0].Name+"@"+s.Npm[0].Range != "is-number@7" || s.Npm[1].Name != "left-pad" {
		t.Errorf("npm: %+v", s.Npm)
	}
	if got := strings.Join(s.Files, ","); got != "requirements.txt,scripts/tool.py,package.json" {
		t.Errorf("files: %s", got)
	}
	// The key depends on the set and the image, not on declaration order.
	rev := *s
	rev.Python = append([]Requirement(nil), s.Python...)
	for i, j := 0, len(rev.Python)-1; i < j; i, j = i+1, j-1 {
		rev.Python[i], rev.Python[j] = rev.Python[j], rev.Python[i]
	}
	rev.normalise()
	img := "sha256:" + strings.Repeat("1", 64)
	if Key(img, s) != Key(img, &rev) {
		t.Error("key depends on declaration order")
	}
	if Key(img, s) == Key("sha256:"+strings.Repeat("2", 64), s) {
		t.Error("key does not depend on the image digest")
	}
}

func TestMissingSourceError(t *testing.T) {
	m := &Set{Python: []Requirement{{Name: "tinydep", Spec: "tinydep==1", Source: "requirements.txt:2"}},
		Npm: []NpmDep{{Name: "left-pad", Range: "^1", Source: "package.json"}}}
	err := MissingSourceError("sk", m, Sources{})
	if !errors.Is(err, ErrNoSource) {
		t.Fatalf("got %v", err)
	}
	for _, w := range []string{"tinydep==1 (requirements.txt:2)", "python_index", "left-pad@^1 (package.json)", "npm_registry", "skillbox deps build sk"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not mention %q", err, w)
		}
	}
	if err := MissingSourceError("sk", m, Sources{PythonIndex: "http://x/simple", NpmRegistry: "http://y"}); err != nil {
		t.Errorf("with sources: %v", err)
	}
}

func FuzzParseRequirements(f *testing.F) {
	f.Add([]byte("pillow>=10\n-r x\nA[b]==1 --hash=sha256:" + strings.Repeat("0", 64) + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseRequirements(data, "r.txt")
		if err != nil {
			return
		}
		for _, r := range rs {
			// What is accepted never names a source of its own.
			if strings.ContainsAny(r.Spec, "/\\@") || strings.HasPrefix(r.Spec, "-") {
				t.Fatalf("accepted %q", r.Spec)
			}
			if _, err := ParseRequirement(r.Spec, "again"); err != nil {
				t.Fatalf("canonical form %q does not parse again: %v", r.Spec, err)
			}
		}
	})
}

func FuzzParsePEP723(f *testing.F) {
	f.Add([]byte("# /// script\n# dependencies = [\"a\"]\n# ///\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParsePEP723(data, "s.py")
		if err != nil {
			return
		}
		for _, r := range rs {
			if strings.ContainsAny(r.Spec, "/\\@") {
				t.Fatalf("accepted %q", r.Spec)
			}
		}
	})
}

func FuzzParsePackageJSON(f *testing.F) {
	f.Add([]byte(`{"dependencies":{"a":"^1"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ds, err := ParsePackageJSON(data, "package.json")
		if err != nil {
			return
		}
		for _, d := range ds {
			if strings.Contains(d.Range, ":") || strings.Contains(d.Name, "..") {
				t.Fatalf("accepted %+v", d)
			}
		}
	})
}
