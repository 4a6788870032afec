package oci

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/skillbox/skillbox/runtime"
	"golang.org/x/sys/unix"
)

func TestSkillMountsSpec(t *testing.T) {
	s := mustSpec(t, codeJob(), SpecOptions{SkillsSource: "/run/skillbox/runs/x/skills"})
	if findMount(s, runtime.SkillMount) != nil {
		t.Error("a job without SkillDir mounts /skill")
	}
	parent := findMount(s, runtime.SkillsMount)
	if parent == nil || parent.Source != "/run/skillbox/runs/x/skills" || !slices.Contains(parent.Options, "ro") {
		t.Fatalf("skills dir mount %+v", parent)
	}
	iParent := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == runtime.SkillsMount })
	for _, name := range []string{"gif-maker", "pdf"} {
		m := findMount(s, "/skills/"+name)
		if m == nil || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
			t.Fatalf("skill %s mount %+v", name, m)
		}
		// A skill is mounted on its mount point in the parent, so after it.
		if i := slices.IndexFunc(s.Mounts, func(mm specs.Mount) bool { return mm.Destination == m.Destination }); i < iParent {
			t.Errorf("skill %s mounted before %s", name, runtime.SkillsMount)
		}
	}
	if !slices.Contains(s.Process.Env, "PYTHONPATH=/skills/gif-maker:/skills/pdf") {
		t.Errorf("env %q lacks both skills on PYTHONPATH", s.Process.Env)
	}

	// A run_script job has neither.
	s = mustSpec(t, goldenJob(), SpecOptions{})
	if findMount(s, runtime.SkillsMount) != nil {
		t.Error("a run_script job mounts /skills")
	}
	// Skills without their mount point directory are refused.
	if _, err := BuildSpec(codeJob(), SpecOptions{WorkdirSource: "/w", HostsSource: "/h"}); !errors.Is(err, runtime.ErrInvalidJob) {
		t.Errorf("skills without SkillsSource: %v", err)
	}
}

func TestPrepareSkillsDir(t *testing.T) {
	rootfs := t.TempDir()
	job := codeJob()
	job.Sandbox.RootFS = rootfs
	if _, err := prepareSkillsDir(t.TempDir(), job); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "rebuild the image") {
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
	if b, _ := os.ReadFile(filepath.Join(got, ".code", "main.py")); string(b) != string(job.Sandbox.Program.Data) {
		t.Errorf("program %q", b)
	}
	// A run_script job needs none.
	if got, err := prepareSkillsDir(t.TempDir(), goldenJob()); got != "" || err != nil {
		t.Errorf("run_script job: %q %v", got, err)
	}
}

// codeJob is a run_code job (as in runtime's skillmounts_test.go).
func codeJob() runtime.Job {
	return runtime.Job{
		Sandbox: runtime.SandboxSpec{
			ID:     "skillbox-golden-1",
			RootFS: "/var/lib/skillbox/images/python/rootfs",
			Skills: []runtime.SkillBind{
				{Source: "/run/skillbox/snapshots/sha256-aa", Target: runtime.SkillTarget("gif-maker")},
				{Source: "/run/skillbox/snapshots/sha256-bb", Target: runtime.SkillTarget("pdf")},
			},
			Program: &runtime.Program{Name: "main.py", Data: []byte("from core.gif import make\n")},
		},
		Invocation: runtime.Invocation{
			Args:      []string{"python3", runtime.ProgramDir + "/main.py", "a"},
			ModuleEnv: runtime.ModulePathEnvDirs("python", runtime.SkillTarget("gif-maker"), runtime.SkillTarget("pdf")),
		},
	}
}
