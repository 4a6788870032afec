package runner_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/skills"
)

// Any file of a skill may run unless policy's script_dirs restricts it;
// the skill root and the script's directory are on the module path.
func TestPrepareScriptDirsAndModulePath(t *testing.T) {
	e, _ := newTestEngine(t, engineConfig+`
policy "narrow" {
  skills      = ["narrow"]
  script_dirs = ["scripts", "core"]
}
policy "none" {
  skills      = ["none"]
  script_dirs = ["scripts"]
}
policy "none-2" {
  skills      = ["none"]
  script_dirs = ["core"]
}
`)
	files := map[string]string{
		"scripts/x.py":   "print(1)\n",
		"core/gif.py":    "print(1)\n",
		"eval/view.js":   "console.log(1)\n",
		"top.py":         "print(1)\n",
		"tools/run.sh":   "echo 1\n",
		"scripts/a/b.py": "print(1)\n",
	}
	mk := func(name string) *skills.Skill {
		return servicetest.MakeSkill(t, t.TempDir(), servicetest.SkillSpec{Name: name, Files: files})
	}
	open, narrow, none := mk("open"), mk("narrow"), mk("none")
	for _, tc := range []struct {
		sk        *skills.Skill
		script    string
		moduleEnv string // "" for none; "-" when refused
		rule      string
	}{
		{open, "scripts/x.py", "PYTHONPATH=/skill:/skill/scripts", policy.RuleScriptDirsDefault},
		{open, "core/gif.py", "PYTHONPATH=/skill:/skill/core", policy.RuleScriptDirsDefault},
		{open, "top.py", "PYTHONPATH=/skill", policy.RuleScriptDirsDefault},
		{open, "scripts/a/b.py", "PYTHONPATH=/skill:/skill/scripts/a", policy.RuleScriptDirsDefault},
		{open, "eval/view.js", "NODE_PATH=/skill:/skill/eval", policy.RuleScriptDirsDefault},
		{open, "tools/run.sh", "", policy.RuleScriptDirsDefault},
		{narrow, "core/gif.py", "PYTHONPATH=/skill:/skill/core", `policy "narrow"`},
		{narrow, "eval/view.js", "-", "script_dirs core, scripts"},
		{narrow, "top.py", "-", `set by policy "narrow"`},
		{none, "scripts/x.py", "-", "no directory in common"},
	} {
		p, err := e.Prepare(runner.RunRequest{Skill: tc.sk, Script: tc.script})
		if tc.moduleEnv == "-" {
			if !errors.Is(err, api.ErrDenied) || !strings.Contains(err.Error(), tc.rule) {
				t.Errorf("%s %s: error %v, want a denial naming %q", tc.sk.Name, tc.script, err, tc.rule)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %s: %v", tc.sk.Name, tc.script, err)
			continue
		}
		if got := strings.Join(p.ModuleEnv(), " "); got != tc.moduleEnv {
			t.Errorf("%s %s: module env %q, want %q", tc.sk.Name, tc.script, got, tc.moduleEnv)
		}
		if !strings.Contains(p.ScriptDirsRule(), tc.rule) {
			t.Errorf("%s %s: script dirs rule %q, want %q", tc.sk.Name, tc.script, p.ScriptDirsRule(), tc.rule)
		}
	}
}
