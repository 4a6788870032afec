package runtime

import (
	"errors"
	"strings"
	"testing"
)

// codeJob is a skills.run_code job: no /skill, two skills under /skills,
// the code in ProgramDir, both skill roots on the module path.
func codeJob() Job {
	return Job{
		Sandbox: SandboxSpec{
			ID:     "skillbox-golden-1",
			RootFS: "/var/lib/skillbox/images/python/rootfs",
			Skills: []SkillBind{
				{Source: "/run/skillbox/snapshots/sha256-aa", Target: SkillTarget("gif-maker")},
				{Source: "/run/skillbox/snapshots/sha256-bb", Target: SkillTarget("pdf")},
			},
			Program: &Program{Name: "main.py", Data: []byte("from core.gif import make\n")},
		},
		Invocation: Invocation{
			Args:      []string{"python3", ProgramDir + "/main.py", "a"},
			ModuleEnv: ModulePathEnvDirs("python", SkillTarget("gif-maker"), SkillTarget("pdf")),
		},
	}
}

func TestValidateSkillMounts(t *testing.T) {
	if err := ValidateJob(codeJob()); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(j *Job){
		"relative source":    func(j *Job) { j.Sandbox.Skills[0].Source = "snap/x" },
		"unclean source":     func(j *Job) { j.Sandbox.Skills[0].Source = "/a/../b" },
		"target outside":     func(j *Job) { j.Sandbox.Skills[0].Target = "/etc/x" },
		"target is /skill":   func(j *Job) { j.Sandbox.Skills[0].Target = SkillMount },
		"target is /skills":  func(j *Job) { j.Sandbox.Skills[0].Target = SkillsMount },
		"target nested":      func(j *Job) { j.Sandbox.Skills[0].Target = "/skills/a/b" },
		"target dotdot":      func(j *Job) { j.Sandbox.Skills[0].Target = "/skills/.." },
		"target dot":         func(j *Job) { j.Sandbox.Skills[0].Target = "/skills/." },
		"target program dir": func(j *Job) { j.Sandbox.Skills[0].Target = ProgramDir },
		"target colon":       func(j *Job) { j.Sandbox.Skills[0].Target = "/skills/a:b" },
		"target trailing /":  func(j *Job) { j.Sandbox.Skills[0].Target = "/skills/a/" },
		"target twice":       func(j *Job) { j.Sandbox.Skills[1].Target = j.Sandbox.Skills[0].Target },
		"too many skills": func(j *Job) {
			for i := 0; i <= maxSkillMounts; i++ {
				j.Sandbox.Skills = append(j.Sandbox.Skills, SkillBind{Source: "/s", Target: SkillTarget("s" + strings.Repeat("x", i%60) + string(rune('a'+i%26)))})
			}
		},
		"program name path":  func(j *Job) { j.Sandbox.Program.Name = "../main.py" },
		"program name empty": func(j *Job) { j.Sandbox.Program.Name = "" },
		"program too big":    func(j *Job) { j.Sandbox.Program.Data = make([]byte, MaxProgramBytes+1) },
	}
	for name, mut := range bad {
		t.Run(name, func(t *testing.T) {
			j := codeJob()
			mut(&j)
			if err := ValidateJob(j); !errors.Is(err, ErrInvalidJob) {
				t.Errorf("err %v, want ErrInvalidJob", err)
			}
		})
	}
}

func TestModulePathEnvDirs(t *testing.T) {
	for _, tc := range []struct {
		family string
		dirs   []string
		want   []string
	}{
		{"python", []string{"/skills/a", "/skills/b"}, []string{"PYTHONPATH=/skills/a:/skills/b"}},
		{"node", []string{"/skills/a"}, []string{"NODE_PATH=/skills/a"}},
		{"python", nil, nil},
		{"shell", []string{"/skills/a"}, nil},
	} {
		got := ModulePathEnvDirs(tc.family, tc.dirs...)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("ModulePathEnvDirs(%q, %q) = %q, want %q", tc.family, tc.dirs, got, tc.want)
		}
		if err := validateModuleEnv(got); err != nil {
			t.Error(err)
		}
	}
}
