//go:build integration

package main

// End-to-end tests of skills.run_code: `skillbox exec` on real runsc and
// runc, and the daemon's skills.run_code through a real client. The test
// skills keep their code outside scripts/ (core/, helpers/) and the code
// imports it the way a SKILL.md tells a model to.

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// A GIF without any library: the header, a 1x1 screen, the trailer.
const codeItGIF = `def make(path):
    data = b"GIF89a" + bytes([1, 0, 1, 0, 0, 0, 0]) + b";"
    with open(path, "wb") as f:
        f.write(data)
    return len(data)
`

// codeItSkills are the skills the run_code tests mount, by name.
var codeItSkills = map[string]map[string]string{
	"gif-maker": {
		"core/__init__.py": "",
		"core/gif.py":      codeItGIF,
	},
	"text-tools": {
		"helpers/text.py": "def shout(s):\n    return s.upper() + '!'\n",
		"helpers/text.js": "exports.shout = (s) => s.toUpperCase() + '!';\n",
	},
	"guarded-code": {"core/guard.py": "OK = 'guarded ok'\n"},
	"nocode-skill": {"core/no.py": "X = 1\n"},
}

// codeItPython uses both skills, writes an output and tries to write
// through every mount.
const codeItPython = `import sys
from core.gif import make
from helpers.text import shout
n = make("outputs/anim.gif")
print(shout("made"), n, sys.argv[1:])
for p in ["/skills/gif-maker/core/gif.py", "/skills/gif-maker/new.txt", "/skills/.code/main.py"]:
    try:
        open(p, "a").write("x")
        print("WROTE", p)
    except OSError as e:
        print("refused", p)
`

// writeCodeSkills writes codeItSkills under root.
func writeCodeSkills(t *testing.T, root string) {
	t.Helper()
	for name, files := range codeItSkills {
		runItWriteFile(t, filepath.Join(root, name, "SKILL.md"), fmt.Sprintf(
			"---\nname: %s\ndescription: Test skill for skills.run_code. Use only in tests.\n---\n# %s\n\nWrite code that imports core.\n", name, name))
		for p, s := range files {
			runItWriteFile(t, filepath.Join(root, name, p), s)
		}
	}
}

func TestExecEndToEnd(t *testing.T) {
	for _, rt := range []string{"runsc", "runc"} {
		t.Run(rt, func(t *testing.T) {
			runItNeed(t, rt)
			f := newRunFixture(t)
			writeCodeSkills(t, f.root)
			auditDir := filepath.Join(f.base, "audit-"+rt)
			cfg := filepath.Join(f.base, "code.hcl")
			runItWriteFile(t, cfg, fmt.Sprintf(`daemon {
  audit_dir = %q
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "skills.run_code"]
}
policy "no-code" {
  skills = ["nocode-*"]
  deny   = ["skills.run_code"]
}
policy "ask-code" {
  skills  = ["guarded-*"]
  confirm = ["skills.run_code"]
}
`, auditDir))
			exec := func(args ...string) runOut {
				return runItExec(t, append([]string{"exec", "--runtime", rt, "--root", f.root, "--config", cfg}, args...)...)
			}

			t.Run("python-two-skills", func(t *testing.T) {
				runItNeedImage(t, "python")
				code := filepath.Join(f.base, "make.py")
				runItWriteFile(t, code, codeItPython)
				outDir := filepath.Join(f.base, "out-"+rt)
				o := exec("--skill", "gif-maker", "--skill", "text-tools", "--outputs", outDir, code, "--", "a", "b")
				if o.code != 0 || !strings.Contains(o.stdout, "MADE! 14 ['a', 'b']") {
					t.Fatalf("code using both skills:\n%s", o)
				}
				if strings.Contains(o.stdout, "WROTE") || strings.Count(o.stdout, "refused") != 3 {
					t.Errorf("a mount was writable:\n%s", o)
				}
				if b, err := os.ReadFile(filepath.Join(outDir, "outputs", "anim.gif")); err != nil || !strings.HasPrefix(string(b), "GIF89a") {
					t.Errorf("outputs/anim.gif: %q %v", b, err)
				}
				// The audit keeps the code, its hash and where each skill was.
				var start *audit.Record
				if err := audit.Read(auditDir, func(r *audit.Record) error {
					if r.Event == audit.EventRunStart {
						start = r
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if start == nil || start.Run.Code == nil || start.Run.Code.Text != codeItPython || start.Run.Code.SHA256 != fmt.Sprintf("%x", sha256.Sum256([]byte(codeItPython))) {
					t.Fatalf("run.start does not keep the code: %+v", start)
				}
				if len(start.Skills) != 2 || start.Skills[0].Path != "/skills/gif-maker" || start.Skills[1].Path != "/skills/text-tools" || start.Method != "skillbox exec" {
					t.Errorf("run.start skills %+v method %q", start.Skills, start.Method)
				}
			})
			t.Run("shell-exit-code", func(t *testing.T) {
				runItNeedImage(t, "shell")
				o := exec("--skill", "gif-maker", "--language", "shell", "-c", `echo /skills/*; echo "args=$*"; echo x > /skills/gif-maker/x || echo refused; exit 3`, "--", "p", "q")
				if o.code != 3 || !strings.Contains(o.stdout, "/skills/gif-maker\nargs=p q\nrefused") {
					t.Fatalf("shell code:\n%s", o)
				}
			})
			t.Run("node-from-extension", func(t *testing.T) {
				runItNeedImage(t, "node")
				code := filepath.Join(f.base, "shout.js")
				runItWriteFile(t, code, "const { shout } = require('helpers/text');\nconsole.log(shout(process.argv[2]));\n")
				o := exec("--json", "--skill", "text-tools", code, "hi")
				m := runItJSON(t, o)
				if o.code != 0 || m["stdout"] != "HI!\n" || m["image"] != "node" || m["path"] != "/skills/.code/main.js" {
					t.Fatalf("node code:\n%s", o)
				}
				if sk, _ := m["skills"].([]any); len(sk) != 1 || sk[0].(map[string]any)["path"] != "/skills/text-tools" {
					t.Errorf("skills in --json: %v", m["skills"])
				}
			})
			t.Run("policy-deny", func(t *testing.T) {
				o := exec("--skill", "gif-maker", "--skill", "nocode-skill", "--language", "python", "-c", "print(1)")
				runItWantError(t, "denied skill", o, 1, "skills.run_code", `policy "no-code"`)
			})
			t.Run("policy-confirm", func(t *testing.T) {
				runItNeedImage(t, "python")
				o := exec("--skill", "guarded-code", "--language", "python", "-c", "from core.guard import OK; print(OK)")
				runItWantError(t, "guarded skill", o, 1, "needs confirmation", "--yes")
				o = exec("--yes", "--skill", "guarded-code", "--language", "python", "-c", "from core.guard import OK; print(OK)")
				if o.code != 0 || o.stdout != "guarded ok\n" {
					t.Fatalf("confirmed with --yes:\n%s", o)
				}
			})
			t.Run("usage", func(t *testing.T) {
				runItWantError(t, "no skill", exec("--language", "python", "-c", "1"), 2, "--skill NAME")
				runItWantError(t, "no language", exec("--skill", "gif-maker", "-c", "1"), 2, "--language")
				runItWantError(t, "unknown skill", exec("--skill", "nope", "--language", "python", "-c", "1"), 1, `"nope"`)
			})
		})
	}
}

// The daemon's skills.run_code through the Go client: both skills
// importable, instructions naming the mounts, policy deny and confirm.
func TestDaemonRunCode(t *testing.T) {
	needDaemon(t)
	root, err := os.MkdirTemp("", "sbcode-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	writeCodeSkills(t, root)
	if err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			err = os.Chmod(p, 0o755)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	d := newItDaemon(t, root)
	d.start()
	c := d.client()
	ctx := ctxT(t)

	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"gif-maker", "text-tools"}}))
	ins := must[*api.InstructionsResult](t, "sessions.instructions")(c.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	if !strings.Contains(ins.Instructions, "- gif-maker: /skills/gif-maker\n- text-tools: /skills/text-tools\n") {
		t.Errorf("instructions do not name the mounts:\n%s", ins.Instructions)
	}
	res := must[*api.RunScriptResult](t, "skills.run_code")(c.RunCode(ctx, api.Peer{}, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"x"}}, Language: api.LanguagePython, Code: codeItPython}))
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "MADE! 14 ['x']") || strings.Contains(res.Stdout, "WROTE") {
		t.Fatalf("run_code result %+v", res)
	}
	if len(res.Skills) != 2 || res.Skills[0].Path != "/skills/gif-maker" || res.Path != "/skills/.code/main.py" {
		t.Errorf("result skills %+v path %q", res.Skills, res.Path)
	}
	var gif []byte
	for _, o := range res.Outputs {
		if o.Path == "outputs/anim.gif" {
			gif, _ = base64.StdEncoding.DecodeString(o.Content)
		}
	}
	if !strings.HasPrefix(string(gif), "GIF89a") {
		t.Errorf("outputs %+v", res.Outputs)
	}

	// Deny: one loaded skill denies run_code, so the call is denied.
	must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"nocode-skill"}, Mode: api.LoadAdd}))
	_, err = c.RunCode(ctx, api.Peer{}, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: api.LanguagePython, Code: "print(1)"})
	if e := wantKind(t, "run_code with a denying skill", err, api.KindDenied); !strings.Contains(e.Message, `policy "no-code"`) {
		t.Errorf("deny message %q", e.Message)
	}

	// Confirm: held, approved, then run once with the approval.
	gs := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: gs, Names: []string{"guarded-code"}}))
	p := api.RunCodeParams{RunInputs: api.RunInputs{SessionID: gs}, Language: api.LanguagePython, Code: "from core.guard import OK; print(OK)"}
	_, err = c.RunCode(ctx, api.Peer{}, p)
	cr, ok := wantKind(t, "guarded run_code", err, api.KindConfirmationRequired).ConfirmationRequired()
	if !ok {
		t.Fatalf("no confirmation data in %v", err)
	}
	must[*api.Confirmation](t, "confirmations.approve")(c.ApproveConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: cr.ConfirmationID}))
	p.ConfirmationID = cr.ConfirmationID
	res = must[*api.RunScriptResult](t, "approved run_code")(c.RunCode(ctx, api.Peer{}, p))
	if res.Stdout != "guarded ok\n" {
		t.Errorf("approved run %+v", res)
	}

	var starts int
	for _, r := range d.records() {
		if r.Event == audit.EventRunStart && r.Method == api.MethodSkillsRunCode {
			starts++
			if r.Run.Code == nil || r.Run.Code.Text == "" || r.Run.Code.SHA256 == "" {
				t.Errorf("run.start without the code: %+v", r.Run)
			}
		}
	}
	if starts != 2 {
		t.Errorf("%d run.start records of skills.run_code, want 2", starts)
	}
}
