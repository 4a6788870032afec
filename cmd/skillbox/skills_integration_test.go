//go:build integration

package main

// Acceptance tests for what real skills expect of the images: LibreOffice
// headless and poppler in the python image, pypdf form filling, every
// batteries-included library, npm in the node image, the usual tools in the
// shell image, and python-slim selected through the config. Each runs the
// real `skillbox run` binary (SKILLBOX_BIN, or the one TestMain builds) on
// runsc and on runc, with the skills in testdata/skills and the images in
// SKILLBOX_IMAGES. Run with
//
//	go test -tags integration ./cmd/skillbox/ -run TestSkillImages -v
//
// The runsc on PATH is used, or SKILLBOX_TEST_RUNSC (a current build, run
// with the systrap platform); docs/BENCHMARKS.md says what differs between
// Debian 12's runsc and a current one.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// skillImagesEnv is one runtime's test setting: a copy of testdata/skills
// the sandbox uid can read, and configs with room for LibreOffice.
type skillImagesEnv struct {
	rt     string
	base   string
	root   string
	config string // the default images
	slim   string // .py runs in python-slim
}

func newSkillImagesEnv(t *testing.T, rt string) *skillImagesEnv {
	t.Helper()
	runItNeed(t, rt)
	base, err := os.MkdirTemp("", "sbskills-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A current runsc keeps its empty network namespace mounted in
		// its state dir.
		unmountNullNetns(filepath.Join(base, "state-"+rt))
		if t.Failed() {
			t.Logf("kept %s for inspection", base)
			return
		}
		os.RemoveAll(base)
	})
	// The sandboxes' uids must reach the skills: CopyFS makes 0755
	// directories and 0644 files (umask 022), MkdirTemp a 0700 base.
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &skillImagesEnv{rt: rt, base: base, root: filepath.Join(base, "skills")}
	if err := os.CopyFS(e.root, os.DirFS("testdata/skills")); err != nil {
		t.Fatal(err)
	}
	binary := ""
	if p := os.Getenv("SKILLBOX_TEST_RUNSC"); p != "" && rt == "runsc" {
		binary = fmt.Sprintf("  binary    = %q\n  platform  = \"systrap\"\n", p)
	}
	common := fmt.Sprintf(`runtime %q {
  state_dir = %q
%s}
limits {
  timeout = "5m"
  memory  = "1GiB"
}
`, rt, filepath.Join(base, "state-"+rt), binary)
	e.config = filepath.Join(base, "skillbox.hcl")
	e.slim = filepath.Join(base, "slim.hcl")
	for p, body := range map[string]string{
		e.config: common,
		e.slim:   common + "image \"python\" {\n  recipe = \"python-slim\"\n}\n",
	} {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// needImage skips unless the image is built and current in the test store.
func (e *skillImagesEnv) needImage(t *testing.T, name string) {
	t.Helper()
	out, err := exec.Command(itBin, "images", "list", "--json", "--dir", itImages).Output()
	if err != nil {
		runtimetest.SkipUnlessRequired(t, "cannot list the images in %s (%v): build them with `skillbox images build`", itImages, err)
	}
	var list []struct {
		Name  string `json:"name"`
		Built bool   `json:"built"`
		Stale bool   `json:"stale"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	for _, im := range list {
		if im.Name != name {
			continue
		}
		if !im.Built {
			runtimetest.SkipUnlessRequired(t, "image %q is not built in %s: run `skillbox images build %s` (or set SKILLBOX_IMAGES)", name, itImages, name)
		}
		if im.Stale {
			t.Fatalf("image %q in %s is older than its recipe: run `skillbox images build --if-needed --dir %s %s`", name, itImages, itImages, name)
		}
		return
	}
	t.Fatalf("no recipe named %q", name)
}

// skillImagesOut is one finished `skillbox run` and where its outputs went.
type skillImagesOut struct {
	runOut
	outputs string // the --outputs directory
}

// run is `skillbox run --config CONFIG --runtime RT --root ROOT --outputs DIR SKILL SCRIPT`.
func (e *skillImagesEnv) run(t *testing.T, config, skill, script string) skillImagesOut {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	o := runItExec(t, "run", "--config", config, "--runtime", e.rt, "--root", e.root, "--no-build",
		"--outputs", out, skill, script)
	return skillImagesOut{runOut: o, outputs: out}
}

// output returns the bytes of the one returned file called name, wherever
// under the outputs directory the CLI put it (outputs/ or the workdir's
// relative path).
func (o skillImagesOut) output(t *testing.T, name string) []byte {
	t.Helper()
	var found []string
	filepath.WalkDir(o.outputs, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && d.Name() == name {
			found = append(found, p)
		}
		return nil
	})
	if len(found) != 1 {
		t.Fatalf("want one output called %s, found %v\n%s", name, found, o)
	}
	b, err := os.ReadFile(found[0])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lastJSON decodes the last line of stdout.
func (o skillImagesOut) lastJSON(t *testing.T, v any) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(o.stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		t.Fatalf("last stdout line is not JSON: %v\n%s", err, o)
	}
}

func TestSkillImages(t *testing.T) {
	for _, rt := range []string{"runsc", "runc"} {
		t.Run(rt, func(t *testing.T) {
			e := newSkillImagesEnv(t, rt)
			for _, tc := range skillImageCases {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, e) })
			}
		})
	}
}

var skillImageCases = []struct {
	name string
	fn   func(t *testing.T, e *skillImagesEnv)
}{
	{"soffice-to-pdf-and-pdftoppm", func(t *testing.T, e *skillImagesEnv) {
		e.needImage(t, "python")
		o := e.run(t, e.config, "batteries", "scripts/office.py")
		if o.code != 0 {
			t.Fatalf("converting a .docx with soffice --headless and rendering it with pdftoppm failed:\n%s", o)
		}
		if !strings.Contains(o.stdout, "pdf text: Quarterly report Converted by soffice inside the sandbox.") {
			t.Errorf("the PDF's text is not the document's:\n%s", o)
		}
		if pdf := o.output(t, "report.pdf"); !bytes.HasPrefix(pdf, []byte("%PDF-")) {
			t.Errorf("report.pdf is not a PDF: %q…", pdf[:min(len(pdf), 16)])
		}
		if png := o.output(t, "page-1.png"); !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 500 {
			t.Errorf("page-1.png is not a rendered page (%d bytes)", len(png))
		}
	}},
	{"pypdf-form-fields", func(t *testing.T, e *skillImagesEnv) {
		e.needImage(t, "python")
		o := e.run(t, e.config, "batteries", "scripts/forms.py")
		if o.code != 0 {
			t.Fatalf("reading and filling a PDF form with pypdf failed:\n%s", o)
		}
		var got struct {
			Before     map[string]string `json:"before"`
			TextFields []string          `json:"text_fields"`
			After      map[string]string `json:"after"`
		}
		o.lastJSON(t, &got)
		want := map[string][2]string{ // field: before, after
			"applicant": {"", "Ada Lovelace"},
			"city":      {"Paris", "London"},
			"agree":     {"/Off", "/Yes"},
		}
		for f, w := range want {
			if got.Before[f] != w[0] || got.After[f] != w[1] {
				t.Errorf("field %s: before %q after %q, want %q then %q", f, got.Before[f], got.After[f], w[0], w[1])
			}
		}
		if strings.Join(got.TextFields, ",") != "applicant,city" {
			t.Errorf("text fields %v", got.TextFields)
		}
		for _, name := range []string{"form.pdf", "filled.pdf"} {
			if b := o.output(t, name); !bytes.HasPrefix(b, []byte("%PDF-")) {
				t.Errorf("%s is not a PDF", name)
			}
		}
	}},
	{"batteries-included-imports", func(t *testing.T, e *skillImagesEnv) {
		e.needImage(t, "python")
		o := e.run(t, e.config, "batteries", "scripts/imports.py")
		var got struct {
			Failed   []string          `json:"failed"`
			Versions map[string]string `json:"versions"`
		}
		o.lastJSON(t, &got)
		if o.code != 0 || len(got.Failed) > 0 {
			t.Fatalf("the python image lacks what it promises: %q\n%s", got.Failed, o)
		}
		t.Logf("versions: %v", got.Versions)
		if png := o.output(t, "plot.png"); !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Error("matplotlib did not write a PNG")
		}
	}},
	{"python-slim-through-config", func(t *testing.T, e *skillImagesEnv) {
		e.needImage(t, "python-slim")
		o := e.run(t, e.slim, "batteries", "scripts/slim.py")
		if o.code != 0 {
			t.Fatalf("python-slim run:\n%s", o)
		}
		var got struct {
			Pypdf    string `json:"pypdf"`
			Soffice  bool   `json:"soffice"`
			Pdftoppm bool   `json:"pdftoppm"`
		}
		o.lastJSON(t, &got)
		if got.Soffice || !got.Pdftoppm || !strings.HasPrefix(got.Pypdf, "5.") && !strings.HasPrefix(got.Pypdf, "6.") {
			t.Errorf(`image "python" { recipe = "python-slim" } should run .py in the slim image (pypdf 5+, poppler, no LibreOffice): %+v`, got)
		}
	}},
	{"node-npm", func(t *testing.T, e *skillImagesEnv) {
		e.needImage(t, "node")
		o := e.run(t, e.config, "tools", "scripts/npm.js")
		if o.code != 0 || !strings.Contains(o.stdout, "npm ") || !strings.Contains(o.stdout, "node v") {
			t.Fatalf("npm --version in the node image:\n%s", o)
		}
	}},
	{"shell-tools", func(t *testing.T, e *skillImagesEnv) {
		e.needImage(t, "shell")
		o := e.run(t, e.config, "tools", "scripts/tools.sh")
		for _, want := range []string{"curl: curl ", "jq: 6", "git: first", "unzip: hi", "awk: 12"} {
			if !strings.Contains(o.stdout, want) {
				t.Errorf("missing %q", want)
			}
		}
		if o.code != 0 || t.Failed() {
			t.Fatalf("curl, jq, git, zip and unzip in the shell image:\n%s", o)
		}
	}},
}
