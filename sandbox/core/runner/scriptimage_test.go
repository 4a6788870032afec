package runner_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/skills"
)

// progImages are images with a rootfs of empty programs, for the image
// choice by the programs a shell script starts.
type progImages struct{ roots map[string]string }

var _ runner.ProgramLister = progImages{}

func (p progImages) Ensure(_ context.Context, name string, _ io.Writer) (runtime.ImageRef, string, error) {
	r, ok := p.roots[name]
	if !ok {
		return runtime.ImageRef{}, "", errors.New("not built")
	}
	return runtime.ImageRef{Name: name, Digest: "sha256:" + strings.Repeat("cd", 32)}, r, nil
}

func (p progImages) Programs(name string) (*deps.Programs, error) {
	r, ok := p.roots[name]
	if !ok {
		return nil, errors.New("not built")
	}
	return deps.ListPrograms(r), nil
}

// fakeRoots makes rootfs trees with the given programs in usr/bin (and bin
// a link to it, as in Debian's merged /usr).
func fakeRoots(t *testing.T, progs map[string][]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for im, names := range progs {
		root := filepath.Join(t.TempDir(), im)
		if err := os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Symlink("usr/bin", filepath.Join(root, "bin"))
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(root, "usr", "bin", n), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		out[im] = root
	}
	return out
}

var docsImages = map[string][]string{
	"python": {"python3", "bash", "sh", "pdfinfo", "qpdf", "soffice", "pandoc", "grep"},
	"shell":  {"bash", "sh", "node", "jq", "grep"},
	"node":   {"node", "pdfinfo", "qpdf", "soffice"}, // no bash: cannot run a shell script
}

func docsSkill(t *testing.T) *skills.Skill {
	return servicetest.MakeSkill(t, t.TempDir(), servicetest.SkillSpec{Name: "docs", Files: map[string]string{
		"scripts/pdf.sh":     "#!/bin/bash\nset -e\npages=$(pdfinfo \"$1\" | grep Pages)\nqpdf --check \"$1\"\nsoffice --version\n",
		"scripts/web.sh":     "node --version | jq -R .\n",
		"scripts/mixed.sh":   "node build.js\npdfinfo out.pdf\n",
		"scripts/missing.sh": "nosuchtool --help\n",
		"scripts/abs.sh":     "/usr/bin/pdfinfo x.pdf\n",
		"scripts/noext":      "#!/bin/sh\npandoc -v\n",
		"scripts/a.py":       "import os\nos.system('pdfinfo x')\n",
	}})
}

func TestShellScriptImageByPrograms(t *testing.T) {
	roots := fakeRoots(t, docsImages)
	for _, tc := range []struct {
		name, script, image string
		roots               []string // images built; nil: all
		rule                []string // the rule mentions these
	}{
		{name: "document tools move it", script: "scripts/pdf.sh", image: "python",
			rule: []string{`image "python"`, `chosen over image "shell"`, "pdfinfo, qpdf, soffice", `"shell" lacks`}},
		{name: "absolute path", script: "scripts/abs.sh", image: "python", rule: []string{"/usr/bin/pdfinfo"}},
		{name: "shebang, no extension", script: "scripts/noext", image: "python", rule: []string{"pandoc"}},
		{name: "its own image has them", script: "scripts/web.sh", image: "shell"},
		{name: "no image has them all", script: "scripts/mixed.sh", image: "shell",
			rule: []string{"starts pdfinfo, which image \"shell\" lacks and no other built image has together with bash"}},
		{name: "a program no image has", script: "scripts/missing.sh", image: "shell", rule: []string{"nosuchtool"}},
		{name: "the other image is not built", script: "scripts/pdf.sh", image: "shell", roots: []string{"shell", "node"}},
		{name: "its own image is not built", script: "scripts/pdf.sh", image: "shell", roots: []string{"python"}},
		{name: "not a shell script", script: "scripts/a.py", image: "python"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			built := roots
			if tc.roots != nil {
				built = map[string]string{}
				for _, n := range tc.roots {
					built[n] = roots[n]
				}
			}
			e, _ := newTestEngine(t, engineConfig, func(o *runner.Options) { o.Images = progImages{roots: built} })
			p, err := e.Prepare(runner.RunRequest{Skill: docsSkill(t), Script: tc.script})
			if err != nil {
				t.Fatal(err)
			}
			if p.Interpreter().Image != tc.image {
				t.Errorf("image %q, want %q (rule %s)", p.Interpreter().Image, tc.image, p.Interpreter().Rule)
			}
			if tc.image == "python" && tc.script != "scripts/a.py" && p.Argv()[0] != "bash" {
				t.Errorf("argv %q: a shell script moved to another image still runs with bash", p.Argv())
			}
			for _, want := range tc.rule {
				if !strings.Contains(p.Interpreter().Rule, want) {
					t.Errorf("rule %q lacks %q", p.Interpreter().Rule, want)
				}
			}
		})
	}
}

// The run goes to the chosen image, and its audit record says why.
func TestShellScriptImageInAudit(t *testing.T) {
	roots := fakeRoots(t, docsImages)
	aud := &servicetest.Auditor{}
	e, rt := newTestEngine(t, engineConfig, func(o *runner.Options) {
		o.Images = progImages{roots: roots}
		o.Audit = audit.NewJournal(aud, nil)
	})
	if _, err := e.Run(context.Background(), runner.RunRequest{Skill: docsSkill(t), Script: "scripts/pdf.sh"}); err != nil {
		t.Fatal(err)
	}
	if job := rt.Jobs()[0]; job.Sandbox.Image.Name != "python" || job.Sandbox.RootFS != roots["python"] {
		t.Errorf("job image %q rootfs %q, want python's", job.Sandbox.Image.Name, job.Sandbox.RootFS)
	}
	starts := aud.Events(audit.EventRunStart)
	if len(starts) != 1 || !strings.Contains(starts[0].Detail["interpreter_rule"], "pdfinfo, qpdf, soffice") || starts[0].Run.Image != "python" {
		t.Errorf("run.start: detail %v image %q", starts[0].Detail, starts[0].Run.Image)
	}
}

func TestCheckSkillShellPrograms(t *testing.T) {
	e, _ := newTestEngine(t, engineConfig, func(o *runner.Options) { o.Images = progImages{roots: fakeRoots(t, docsImages)} })
	res, err := e.CheckSkill(context.Background(), docsSkill(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	missing := 0
	for _, f := range res.Findings {
		if f.Kind == deps.KindProgram {
			got[f.File+" "+f.Name] = f.State
			if f.State == deps.StateMissing {
				missing++
			}
		}
	}
	for k, want := range map[string]string{
		"scripts/pdf.sh pdfinfo":        deps.StateSatisfied, // runs in python, which has it
		"scripts/pdf.sh soffice":        deps.StateSatisfied,
		"scripts/pdf.sh /bin/bash":      deps.StateSatisfied,
		"scripts/web.sh jq":             deps.StateSatisfied,
		"scripts/missing.sh nosuchtool": deps.StateMissing,
		"scripts/mixed.sh pdfinfo":      deps.StateMissing, // stays in shell: node and pdfinfo are in no image together
		"scripts/a.py pdfinfo":          deps.StateSatisfied,
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
	if missing != 2 {
		t.Errorf("%d programs missing, want 2: %+v", missing, res.Findings)
	}
}

// skills.run_code follows the same rule for shell code.
func TestShellCodeImageByPrograms(t *testing.T) {
	e, _ := newTestEngine(t, engineConfig, func(o *runner.Options) { o.Images = progImages{roots: fakeRoots(t, docsImages)} })
	sk := docsSkill(t)
	for code, image := range map[string]string{
		"pdfinfo /skill/a.pdf | grep Pages\n": "python",
		"jq -n 1\n":                           "shell",
	} {
		p, err := e.Prepare(runner.RunRequest{Code: &runner.CodeRequest{Language: "shell", Code: []byte(code), Skills: []*skills.Skill{sk}}})
		if err != nil {
			t.Fatal(err)
		}
		if p.Interpreter().Image != image {
			t.Errorf("code %q: image %q, want %q (%s)", code, p.Interpreter().Image, image, p.Interpreter().Rule)
		}
	}
}
