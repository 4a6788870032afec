package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestValidateJob(t *testing.T) {
	ok := goldenJob()
	if err := ValidateJob(ok); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(j *Job){
		"empty id":          func(j *Job) { j.Sandbox.ID = "" },
		"id with slash":     func(j *Job) { j.Sandbox.ID = "a/b" },
		"id with dot":       func(j *Job) { j.Sandbox.ID = "../x" },
		"id too long":       func(j *Job) { j.Sandbox.ID = strings.Repeat("a", 65) },
		"relative rootfs":   func(j *Job) { j.Sandbox.RootFS = "rootfs" },
		"unclean rootfs":    func(j *Job) { j.Sandbox.RootFS = "/a/../b" },
		"relative skill":    func(j *Job) { j.Sandbox.SkillDir = "skills/x" },
		"no args":           func(j *Job) { j.Invocation.Args = nil },
		"empty argv0":       func(j *Job) { j.Invocation.Args = []string{""} },
		"nul in arg":        func(j *Job) { j.Invocation.Args = []string{"python3", "a\x00b"} },
		"bad env":           func(j *Job) { j.Invocation.Env = []string{"LD_PRELOAD=/x.so"} },
		"file dotdot":       func(j *Job) { j.Invocation.Files = []InputFile{{Name: ".."}} },
		"file under dotdot": func(j *Job) { j.Invocation.Files = []InputFile{{Name: "a/../../b"}} },
		"file absolute":     func(j *Job) { j.Invocation.Files = []InputFile{{Name: "/etc/passwd"}} },
		"file control char": func(j *Job) { j.Invocation.Files = []InputFile{{Name: "a\x1bb"}} },
		"file nul":          func(j *Job) { j.Invocation.Files = []InputFile{{Name: "a\x00b"}} },
		"file under a file": func(j *Job) { j.Invocation.Files = []InputFile{{Name: "a"}, {Name: "a/b"}} },
		"file under a link": func(j *Job) {
			j.Invocation.Files = []InputFile{{Name: "l", Kind: InputSymlink, Target: "/etc"}, {Name: "l/passwd"}}
		},
		"link without target":  func(j *Job) { j.Invocation.Files = []InputFile{{Name: "l", Kind: InputSymlink}} },
		"dir with data":        func(j *Job) { j.Invocation.Files = []InputFile{{Name: "d", Kind: InputDir, Data: []byte("x")}} },
		"unknown kind":         func(j *Job) { j.Invocation.Files = []InputFile{{Name: "d", Kind: "fifo"}} },
		"bad module env":       func(j *Job) { j.Invocation.ModuleEnv = []string{"LD_PRELOAD=/x.so"} },
		"relative module path": func(j *Job) { j.Invocation.ModuleEnv = []string{"PYTHONPATH=/skill:x"} },
		"file empty":           func(j *Job) { j.Invocation.Files = []InputFile{{Name: ""}} },
		"file outputs":         func(j *Job) { j.Invocation.Files = []InputFile{{Name: "outputs"}} },
		"file twice":           func(j *Job) { j.Invocation.Files = []InputFile{{Name: "a"}, {Name: "a"}} },
		"file setuid":          func(j *Job) { j.Invocation.Files = []InputFile{{Name: "a", Mode: 0o4755}} },
		"files over workdir": func(j *Job) {
			j.Sandbox.Limits.WorkdirBytes = 4
			j.Invocation.Files = []InputFile{{Name: "a", Data: []byte("12345")}}
		},
		"file name too long":   func(j *Job) { j.Invocation.Files = []InputFile{{Name: strings.Repeat("n", 256)}} },
		"too many input files": func(j *Job) { j.Invocation.Files = make([]InputFile, MaxInputEntries+1) },
	}
	for name, mut := range bad {
		j := goldenJob()
		mut(&j)
		if err := ValidateJob(j); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s: err %v, want ErrInvalidJob", name, err)
		}
	}
}

func goldenJob() Job {
	return Job{
		Sandbox: SandboxSpec{
			ID:       "skillbox-golden-1",
			RootFS:   "/var/lib/skillbox/images/python/rootfs",
			SkillDir: "/srv/skills/pdf",
		},
		Invocation: Invocation{
			Args: []string{"python3", "/skill/scripts/extract.py", "in.pdf"},
			Env:  []string{"FOO=bar", "LANG=de_DE.UTF-8"},
		},
	}
}

func TestCheckSpec(t *testing.T) {
	spec := goldenJob().Sandbox
	spec.Boot = BootPython
	spec.Limits = Limits{MemoryBytes: 64 << 20}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		spec  func(s *SandboxSpec)
		boots []BootMode
		want  error
	}{
		{"valid", context.Background(), func(*SandboxSpec) {}, LifecycleBoots, nil},
		{"boot mode not offered", context.Background(), func(s *SandboxSpec) { s.Boot = BootSession }, LifecycleBoots, ErrInvalidJob},
		{"unknown boot mode", context.Background(), func(s *SandboxSpec) { s.Boot = "warm" }, LifecycleBoots, ErrInvalidJob},
		{"invalid sandbox part", context.Background(), func(s *SandboxSpec) { s.RootFS = "rootfs" }, LifecycleBoots, ErrInvalidJob},
		{"ctx done", cancelled, func(*SandboxSpec) {}, LifecycleBoots, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec
			tc.spec(&s)
			got, err := CheckSpec(tc.ctx, s, tc.boots...)
			if !errors.Is(err, tc.want) || (tc.want != nil) == (err == nil) {
				t.Fatalf("CheckSpec = %v, want %v", err, tc.want)
			}
			if err == nil && got.Limits != (Limits{MemoryBytes: 64 << 20}).WithDefaults() {
				t.Errorf("limits %+v, want the spec's with the defaults", got.Limits)
			}
		})
	}
}
