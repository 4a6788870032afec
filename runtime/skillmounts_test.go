package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// codeJob is a skills.run_code job: no /skill, two skills under /skills,
// the code in ProgramDir, both skill roots on the module path.
func codeJob() Job {
	return Job{
		ID:     "skillbox-golden-1",
		RootFS: "/var/lib/skillbox/images/python/rootfs",
		Skills: []SkillBind{
			{Source: "/run/skillbox/snapshots/sha256-aa", Target: SkillTarget("gif-maker")},
			{Source: "/run/skillbox/snapshots/sha256-bb", Target: SkillTarget("pdf")},
		},
		Program:   &Program{Name: "main.py", Data: []byte("from core.gif import make\n")},
		Args:      []string{"python3", ProgramDir + "/main.py", "a"},
		ModuleEnv: ModulePathEnvDirs("python", SkillTarget("gif-maker"), SkillTarget("pdf")),
	}
}

func TestSkillMountsSpec(t *testing.T) {
	s := mustSpec(t, codeJob(), SpecOptions{SkillsSource: "/run/skillbox/runs/x/skills"})
	if findMount(s, SkillMount) != nil {
		t.Error("a job without SkillDir mounts /skill")
	}
	parent := findMount(s, SkillsMount)
	if parent == nil || parent.Source != "/run/skillbox/runs/x/skills" || !slices.Contains(parent.Options, "ro") {
		t.Fatalf("skills dir mount %+v", parent)
	}
	iParent := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == SkillsMount })
	for _, name := range []string{"gif-maker", "pdf"} {
		m := findMount(s, "/skills/"+name)
		if m == nil || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
			t.Fatalf("skill %s mount %+v", name, m)
		}
		// A skill is mounted on its mount point in the parent, so after it.
		if i := slices.IndexFunc(s.Mounts, func(mm specs.Mount) bool { return mm.Destination == m.Destination }); i < iParent {
			t.Errorf("skill %s mounted before %s", name, SkillsMount)
		}
	}
	if !slices.Contains(s.Process.Env, "PYTHONPATH=/skills/gif-maker:/skills/pdf") {
		t.Errorf("env %q lacks both skills on PYTHONPATH", s.Process.Env)
	}

	// A run_script job has neither.
	s = mustSpec(t, goldenJob(), SpecOptions{})
	if findMount(s, SkillsMount) != nil {
		t.Error("a run_script job mounts /skills")
	}
	// Skills without their mount point directory are refused.
	if _, err := BuildSpec(codeJob(), SpecOptions{WorkdirSource: "/w", HostsSource: "/h"}); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("skills without SkillsSource: %v", err)
	}
}

func TestValidateSkillMounts(t *testing.T) {
	if err := ValidateJob(codeJob()); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(j *Job){
		"relative source":    func(j *Job) { j.Skills[0].Source = "snap/x" },
		"unclean source":     func(j *Job) { j.Skills[0].Source = "/a/../b" },
		"target outside":     func(j *Job) { j.Skills[0].Target = "/etc/x" },
		"target is /skill":   func(j *Job) { j.Skills[0].Target = SkillMount },
		"target is /skills":  func(j *Job) { j.Skills[0].Target = SkillsMount },
		"target nested":      func(j *Job) { j.Skills[0].Target = "/skills/a/b" },
		"target dotdot":      func(j *Job) { j.Skills[0].Target = "/skills/.." },
		"target dot":         func(j *Job) { j.Skills[0].Target = "/skills/." },
		"target program dir": func(j *Job) { j.Skills[0].Target = ProgramDir },
		"target colon":       func(j *Job) { j.Skills[0].Target = "/skills/a:b" },
		"target trailing /":  func(j *Job) { j.Skills[0].Target = "/skills/a/" },
		"target twice":       func(j *Job) { j.Skills[1].Target = j.Skills[0].Target },
		"too many skills": func(j *Job) {
			for i := 0; i <= maxSkillMounts; i++ {
				j.Skills = append(j.Skills, SkillBind{Source: "/s", Target: SkillTarget("s" + strings.Repeat("x", i%60) + string(rune('a'+i%26)))})
			}
		},
		"program name path":  func(j *Job) { j.Program.Name = "../main.py" },
		"program name empty": func(j *Job) { j.Program.Name = "" },
		"program too big":    func(j *Job) { j.Program.Data = make([]byte, MaxProgramBytes+1) },
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

func TestPrepareSkillsDir(t *testing.T) {
	rootfs := t.TempDir()
	job := codeJob()
	job.RootFS = rootfs
	if _, err := prepareSkillsDir(t.TempDir(), job); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "rebuild the image") {
		t.Fatalf("image without /skills: %v", err)
	}
	if err := os.Mkdir(filepath.Join(rootfs, "skills"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := unix.Umask(0o077)
	dir := t.TempDir()
	got, err := prepareSkillsDir(dir, job)
	unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(dir, bundleSkills) {
		t.Errorf("dir %s", got)
	}
	for rel, mode := range map[string]os.FileMode{
		".": 0o755 | os.ModeDir, "gif-maker": 0o755 | os.ModeDir, "pdf": 0o755 | os.ModeDir,
		".code": 0o755 | os.ModeDir, ".code/main.py": 0o644,
	} {
		st, err := os.Lstat(filepath.Join(got, rel))
		if err != nil || st.Mode() != mode {
			t.Errorf("%s: %v %v, want %v", rel, st.Mode(), err, mode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(got, ".code", "main.py")); string(b) != string(job.Program.Data) {
		t.Errorf("program %q", b)
	}
	// A run_script job needs none.
	if got, err := prepareSkillsDir(t.TempDir(), goldenJob()); got != "" || err != nil {
		t.Errorf("run_script job: %q %v", got, err)
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
