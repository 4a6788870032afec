package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/skills"
)

// collisionConfig gives net-x egress and a secret, as a trusted skill whose
// name another skill tries to take would have.
const collisionConfig = testConfig + `
secret "NET_X_TOKEN" {
  from_env = "SKILLBOX_NAMES_TEST_TOKEN"
  hosts    = ["api.net-x.test"]
}
policy "net-x" {
  skills = ["net-x"]
  egress = ["api.net-x.test:443"]
}
`

// TestDaemonSkillNameCollision indexes skills/testdata/collision/root with
// the real registry: aa-helper declares "name: net-x" and sorts before the
// real net-x. skills.load net-x must load the real one, and net-x's egress
// and secret must never reach the impostor's runs; a name two directories
// claim is refused, saying why and what to do.
func TestDaemonSkillNameCollision(t *testing.T) {
	t.Setenv("SKILLBOX_NAMES_TEST_TOKEN", "net-x-token-value")
	root, err := filepath.Abs("../../../skills/testdata/collision/root")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := skills.NewRegistry(skills.RegistryOptions{Roots: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, collisionConfig, nil, func(o *Options, _ *store.StateDB) {
		o.Skills = reg
	})
	realDir := filepath.Join(root, "net-x")
	lastJob := func() runtime.Job {
		t.Helper()
		jobs := h.rt.Jobs()
		if len(jobs) == 0 {
			t.Fatal("no run reached the runtime")
		}
		return jobs[len(jobs)-1]
	}

	// net-x is the real one, with its policy. (No subtests: the harness
	// fails the test it was made with.)
	{
		sid := h.session(peerA)
		r := h.load(peerA, sid, "", "net-x")
		if len(r.ActiveSkills) != 1 || r.ActiveSkills[0].RootDir != realDir {
			t.Fatalf("skills.load net-x = %+v, want the skill in %s", r.ActiveSkills, realDir)
		}
		h.ok(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.sh"}, nil)
		job := lastJob()
		if job.Sandbox.SkillDir != realDir {
			t.Errorf("run of net-x mounted %s, want %s", job.Sandbox.SkillDir, realDir)
		}
		if job.Sandbox.Egress == nil || len(job.Sandbox.Egress.Secrets) != 1 {
			t.Errorf("net-x's run lacks its egress and secret: %+v", job.Sandbox.Egress)
		}
	}
	// The impostor is only aa-helper, without net-x's policy.
	{
		sid := h.session(peerA)
		r := h.load(peerA, sid, "", "aa-helper")
		if len(r.ActiveSkills) != 1 || r.ActiveSkills[0].Name != "aa-helper" {
			t.Fatalf("skills.load aa-helper = %+v", r.ActiveSkills)
		}
		h.ok(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.sh"}, nil)
		job := lastJob()
		if job.Sandbox.SkillDir != filepath.Join(root, "aa-helper") {
			t.Errorf("run of aa-helper mounted %s", job.Sandbox.SkillDir)
		}
		if job.Sandbox.Egress != nil || job.Sandbox.Network {
			t.Errorf("the impostor got network or egress: network %v egress %+v", job.Sandbox.Network, job.Sandbox.Egress)
		}
		for _, e := range job.Invocation.Env {
			if strings.Contains(e, "net-x-token-value") || strings.Contains(e, "NET_X_TOKEN") {
				t.Errorf("the impostor's env holds net-x's secret: %q", e)
			}
		}
	}
	// A name claimed twice is refused for both.
	{
		sid := h.session(peerA)
		h.fails(peerA, "skills.load", api.LoadParams{SessionID: sid, Names: []string{"dup-x"}}, api.KindDenied,
			`skill name "dup-x" is claimed by 2`, "group-a/dup-x", "group-b/dup-x", "rename or remove")
		h.fails(peerA, "skills.activate", api.ActivateParams{SessionID: sid, Name: "dup-x"}, api.KindDenied,
			`skill name "dup-x" is claimed by 2`, "rename or remove")
	}
}

// A loaded skill whose name another directory of its root then also
// claims is not run: the run says why and what to do.
func TestDaemonRunRefusedWhenNameBecomesClaimedTwice(t *testing.T) {
	root := t.TempDir()
	write := func(dir string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
			t.Fatal(err)
		}
		md := "---\nname: x\ndescription: A skill.\n---\nBody.\n"
		if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(md), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "scripts", "run.sh"), []byte("echo hi\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "x"))
	reg, err := skills.NewRegistry(skills.RegistryOptions{Roots: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testConfig, nil, func(o *Options, _ *store.StateDB) { o.Skills = reg })
	sid := h.session(peerA)
	h.load(peerA, sid, "", "x")
	h.ok(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.sh"}, nil)

	write(filepath.Join(root, "group", "x"))
	if err := reg.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := len(h.rt.Jobs())
	h.fails(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.sh"}, api.KindDenied,
		`skill "x" was loaded, but now`, "claimed by 2", "rename or remove")
	if len(h.rt.Jobs()) != n {
		t.Error("the run reached the runtime")
	}
}
