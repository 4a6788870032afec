package images

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDefaultRecipes(t *testing.T) {
	rs, err := DefaultRecipes()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"python", "python-slim", "shell", "node"} {
		r, ok := rs[name]
		if !ok {
			t.Fatalf("default recipe %q missing", name)
		}
		if r.Suite != DefaultSuite || r.Mirror != DefaultMirror || r.Variant != DefaultVariant {
			t.Errorf("%s: suite/mirror/variant = %q %q %q", name, r.Suite, r.Mirror, r.Variant)
		}
		for _, src := range r.Sources {
			if !strings.Contains(src, " "+DefaultSuite+"-") {
				t.Errorf("%s: source %q is not for %s", name, src, DefaultSuite)
			}
		}
		if !strings.HasPrefix(r.File, "builtin:recipes/") {
			t.Errorf("%s: File = %q", name, r.File)
		}
		if len(r.Interpreters) == 0 || r.Notes == "" {
			t.Errorf("%s: interpreters %v, notes %q", name, r.Interpreters, r.Notes)
		}
		if !strings.HasPrefix(r.Hash(), "sha256:") || len(r.Hash()) != 71 {
			t.Errorf("%s: hash %q", name, r.Hash())
		}
	}
	slim := []string{"python3", "python3-yaml", "python3-lxml", "python3-openpyxl", "python3-pypdf",
		"python3-pil", "python3-defusedxml", "python3-numpy", "python3-pandas", "python3-docx",
		"python3-imageio", "python3-pdfminer", "poppler-utils", "qpdf"}
	batteries := append(slices.Clone(slim), "python3-matplotlib", "python3-reportlab", "pandoc",
		"libreoffice-writer-nogui", "libreoffice-calc-nogui", "libreoffice-impress-nogui", "ffmpeg", "git",
		"fonts-dejavu-core", "fonts-liberation", "python3-requests", "python3-bs4", "python3-jinja2", "python3-jsonschema")
	wantPackages := map[string][]string{
		"python":      batteries,
		"python-slim": slim,
		"node":        {"nodejs", "npm"},
		"shell":       {"bash", "coreutils", "curl", "gawk", "git", "grep", "jq", "sed", "unzip", "zip", "nodejs", "npm"},
	}
	for name, want := range wantPackages {
		for _, p := range want {
			if !slices.Contains(rs[name].Packages, p) {
				t.Errorf("%s recipe lacks %s", name, p)
			}
		}
	}
	if slices.ContainsFunc(rs["python-slim"].Packages,
		func(p string) bool { return strings.HasPrefix(p, "libreoffice") }) {
		t.Error("python-slim must stay small: no LibreOffice")
	}
	py := rs["python"]
	if !strings.Contains(py.Notes, "pdfplumber") || !strings.Contains(py.Notes, "pdf2image") {
		t.Errorf("python notes should say pdfplumber and pdf2image are not in Debian: %q", py.Notes)
	}
	if slices.Contains(rs["shell"].Packages, "python3") {
		t.Error("shell recipe must not pull in python")
	}
}

func TestParseRecipe(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		wantErr string // substring; "" means success
		check   func(t *testing.T, r *Recipe)
	}{
		{
			name: "defaults filled in",
			src:  `image "tiny" { packages = ["bash"]; interpreters = ["bash"] }`,
			check: func(t *testing.T, r *Recipe) {
				if r.Name != "tiny" || r.Suite != DefaultSuite || r.Mirror != DefaultMirror || r.Variant != DefaultVariant {
					t.Errorf("got %+v", r)
				}
				want := []string{"deb http://deb.debian.org/debian trixie-updates main",
					"deb http://deb.debian.org/debian-security trixie-security main"}
				if !slices.Equal(r.Sources, want) {
					t.Errorf("default sources %q, want %q", r.Sources, want)
				}
			},
		},
		{
			name: "default sources follow the suite",
			src:  `image "old" { suite = "bookworm"; packages = ["bash"]; interpreters = ["bash"] }`,
			check: func(t *testing.T, r *Recipe) {
				if len(r.Sources) != 2 || !strings.Contains(r.Sources[1], " bookworm-security ") {
					t.Errorf("sources %q", r.Sources)
				}
			},
		},
		{
			name: "no default sources for sid",
			src:  `image "a" { suite = "sid"; packages = ["bash"]; interpreters = ["bash"] }`,
			check: func(t *testing.T, r *Recipe) {
				if len(r.Sources) != 0 {
					t.Errorf("sources %q", r.Sources)
				}
			},
		},
		{
			name: "no default sources for another mirror",
			src:  `image "b" { mirror = "https://mirror.example/debian"; packages = ["bash"]; interpreters = ["bash"] }`,
			check: func(t *testing.T, r *Recipe) {
				if len(r.Sources) != 0 {
					t.Errorf("sources %q", r.Sources)
				}
			},
		},
		{
			name: "an empty sources list means none",
			src:  `image "c" { sources = []; packages = ["bash"]; interpreters = ["bash"] }`,
			check: func(t *testing.T, r *Recipe) {
				if len(r.Sources) != 0 {
					t.Errorf("sources %q", r.Sources)
				}
			},
		},
		{
			name: "all attributes",
			src: `image "ruby" {
  suite = "trixie"
  mirror = "https://mirror.example/debian"
  variant = "minbase"
  sources = ["deb [signed-by=/k.gpg] https://mirror.example/debian-security trixie-security main"]
  packages = ["ruby"]
  interpreters = ["ruby"]
  notes = "  ruby  "
}`,
			check: func(t *testing.T, r *Recipe) {
				if r.Suite != "trixie" || r.Variant != "minbase" || r.Notes != "ruby" || len(r.Sources) != 1 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:    "unknown attribute has file and line",
			src:     "image \"x\" {\n  packages = [\"bash\"]\n  interpreters = [\"bash\"]\n  pakages = [\"jq\"]\n}\n",
			wantErr: "test.hcl:4",
		},
		{
			name:    "unknown attribute is named",
			src:     "image \"x\" {\n  packages = [\"bash\"]\n  interpreters = [\"bash\"]\n  colour = \"red\"\n}\n",
			wantErr: `"colour" is not expected`,
		},
		{
			name:    "unknown block",
			src:     "image \"x\" {\n packages = [\"bash\"]\n interpreters = [\"bash\"]\n}\nthing {}\n",
			wantErr: "test.hcl:5",
		},
		{
			name:    "missing packages",
			src:     `image "x" { interpreters = ["bash"] }`,
			wantErr: "packages",
		},
		{
			name:    "option smuggled as package",
			src:     "image \"x\" {\n  packages = [\"bash,--hook-dir=/tmp\"]\n  interpreters = [\"bash\"]\n}\n",
			wantErr: "test.hcl:1: image \"x\": package",
		},
		{
			name:    "bad name",
			src:     `image "../etc" { packages = ["bash"]; interpreters = ["bash"] }`,
			wantErr: "image name",
		},
		{
			name:    "bad variant",
			src:     `image "x" { variant = "fat"; packages = ["bash"]; interpreters = ["bash"] }`,
			wantErr: "variant",
		},
		{
			name:    "bad mirror",
			src:     `image "x" { mirror = "ftp://x"; packages = ["bash"]; interpreters = ["bash"] }`,
			wantErr: "mirror",
		},
		{
			name:    "bad source line",
			src:     `image "x" { sources = ["deb-src http://x y main"]; packages = ["bash"]; interpreters = ["bash"] }`,
			wantErr: "source",
		},
		{
			name:    "interpreter with a path",
			src:     `image "x" { packages = ["bash"]; interpreters = ["/bin/bash"] }`,
			wantErr: "interpreter",
		},
		{
			name:    "no image block",
			src:     "# empty\n",
			wantErr: "no image block",
		},
		{
			name:    "syntax error has line",
			src:     "image \"x\" {\n  packages = [\n",
			wantErr: "test.hcl:",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := ParseRecipe([]byte(multiLine(tt.src)), "test.hcl")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 1 {
				t.Fatalf("got %d recipes", len(rs))
			}
			if rs[0].File != "test.hcl" {
				t.Errorf("File = %q", rs[0].File)
			}
			tt.check(t, rs[0])
		})
	}
}

func TestLoadRecipesOverride(t *testing.T) {
	site := t.TempDir()
	user := t.TempDir()
	write := func(dir, file, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, file), []byte(multiLine(src)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(site, "python.hcl", `image "python" { packages = ["python3"]; interpreters = ["python3"] }`)
	write(site, "ruby.hcl", `image "ruby" { packages = ["ruby"]; interpreters = ["ruby"] }`)
	write(site, "README.txt", "not a recipe")
	write(user, "mine.hcl", `image "ruby" { packages = ["ruby", "ruby-json"]; interpreters = ["ruby"] }`)

	rs, err := LoadRecipes(site, user)
	if err != nil {
		t.Fatal(err)
	}
	if got := rs["python"].Packages; !slices.Equal(got, []string{"python3"}) {
		t.Errorf("python not overridden: %v", got)
	}
	if rs["python"].File != filepath.Join(site, "python.hcl") {
		t.Errorf("python File = %q", rs["python"].File)
	}
	if got := rs["ruby"].Packages; len(got) != 2 {
		t.Errorf("later directory should win for ruby: %v", got)
	}
	if _, ok := rs["shell"]; !ok {
		t.Error("defaults not kept")
	}

	// Two files in one directory defining one name is ambiguous.
	write(user, "mine2.hcl", `image "ruby" { packages = ["ruby"]; interpreters = ["ruby"] }`)
	if _, err := LoadRecipes(user); err == nil || !strings.Contains(err.Error(), "already defined") {
		t.Errorf("duplicate in one directory: err = %v", err)
	}
	if _, err := LoadRecipes(filepath.Join(site, "nope")); err == nil {
		t.Error("missing directory should be an error")
	}
	bad := t.TempDir()
	write(bad, "bad.hcl", "image \"b\" {\n  packages = [\"x\"]\n  interpreters = [\"x\"]\n  extra = 1\n}\n")
	_, err = LoadRecipes(bad)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(bad, "bad.hcl")+":4") {
		t.Errorf("unknown attribute in a user file: err = %v", err)
	}
}

func TestRecipeHash(t *testing.T) {
	base := func() *Recipe {
		return &Recipe{Name: "x", Suite: "bookworm", Mirror: DefaultMirror, Variant: "essential",
			Packages: []string{"b", "a"}, Interpreters: []string{"x"}, Notes: "n", File: "f"}
	}
	h := base().Hash()
	same := base()
	same.Packages = []string{"a", "b", "a"}
	same.Notes = "other prose"
	same.File = "elsewhere.hcl"
	if same.Hash() != h {
		t.Error("package order, duplicates, notes and file must not change the hash")
	}
	for _, mut := range []func(r *Recipe){
		func(r *Recipe) { r.Packages = append(r.Packages, "c") },
		func(r *Recipe) { r.Suite = "trixie" },
		func(r *Recipe) { r.Mirror = "http://other/debian" },
		func(r *Recipe) { r.Variant = "apt" },
		func(r *Recipe) { r.Sources = []string{"deb http://x y main"} },
		func(r *Recipe) { r.Interpreters = []string{"y"} },
	} {
		r := base()
		mut(r)
		if r.Hash() == h {
			t.Errorf("changed recipe %+v kept hash", r)
		}
	}
}

func TestUnknownImageError(t *testing.T) {
	rs, _ := DefaultRecipes()
	err := errUnknown("ruby", rs)
	if !errors.Is(err, ErrUnknownImage) || !strings.Contains(err.Error(), "node, python, python-slim, shell") {
		t.Errorf("err = %v", err)
	}
}

// multiLine turns "a = 1; b = 2" test shorthand into one attribute per line,
// since HCL allows only one attribute in a single-line block.
func multiLine(src string) string {
	src = strings.ReplaceAll(src, "{ ", "{\n")
	src = strings.ReplaceAll(src, " }", "\n}")
	return strings.ReplaceAll(src, "; ", "\n")
}
