//go:build integration

package runtime_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// A run_code job on real runsc and runc: two skills mounted read-only at
// /skills/<name>, both importable, the code read-only in /skills/.code,
// nothing of it writable and no /skill.
func TestSkillMountsRun(t *testing.T) {
	rootfs := testRootfs(t)
	const program = `
import os, sys
from core.gif import make
from helpers.text import shout
make("outputs/a.gif")
print(shout("both"), sys.argv[1:])
for p in ["/skills/gif/core/gif.py", "/skills/gif/new.txt", "/skills/.code/main.py", "/skills/x"]:
    try:
        open(p, "a").write("x")
        print("WROTE", p)
    except OSError as e:
        print("refused", p, e.errno)
print("skill" if os.path.exists("/skill/SKILL.md") else "no /skill")
print(sorted(os.listdir("/skills")))
`
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			gif := makeSkill(t, map[string]string{"SKILL.md": "gif", "core/__init__.py": "", "core/gif.py": "def make(p):\n    open(p, 'wb').write(b'GIF89a')\n"})
			text := makeSkill(t, map[string]string{"SKILL.md": "text", "helpers/__init__.py": "", "helpers/text.py": "def shout(s):\n    return s.upper()\n"})
			job := runtime.Job{
				Sandbox: runtime.SandboxSpec{
					ID:     newID(),
					RootFS: rootfs,
					Skills: []runtime.SkillBind{
						{Source: gif, Target: runtime.SkillTarget("gif")},
						{Source: text, Target: runtime.SkillTarget("text")},
					},
					Program: &runtime.Program{Name: "main.py", Data: []byte(program)},
				},
				Invocation: runtime.Invocation{
					Args:      []string{"python3", runtime.ProgramDir + "/main.py", "arg1"},
					ModuleEnv: runtime.ModulePathEnvDirs("python", runtime.SkillTarget("gif"), runtime.SkillTarget("text")),
					Limits:    runtime.Limits{Timeout: 60 * time.Second},
				},
			}
			res, err := rt.Run(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			out := string(res.Stdout)
			if res.ExitCode != 0 || !strings.Contains(out, "BOTH ['arg1']") {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.ExitCode, out, res.Stderr)
			}
			if strings.Contains(out, "WROTE") || strings.Count(out, "refused") != 4 {
				t.Errorf("a mount was writable:\n%s", out)
			}
			if !strings.Contains(out, "no /skill") || !strings.Contains(out, "['.code', 'gif', 'text']") {
				t.Errorf("mounts seen:\n%s", out)
			}
			if len(res.Outputs) != 1 || res.Outputs[0].Path != "outputs/a.gif" || string(res.Outputs[0].Data) != "GIF89a" {
				t.Errorf("outputs %+v", res.Outputs)
			}
			if b, _ := os.ReadFile(filepath.Join(gif, "core", "gif.py")); !strings.HasPrefix(string(b), "def make") || fileExists(filepath.Join(gif, "new.txt")) {
				t.Errorf("the skill on the host changed: %q", b)
			}
			assertClean(t, name, opts, job.Sandbox.ID)
		})
	}
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
