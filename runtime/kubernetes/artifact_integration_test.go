//go:build integration

package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// TestArtifacts runs jobs with a skill directory and a dependency layer on
// the test cluster: the backend pushes each job's derived image to a
// registry the test serves at the cluster's registry address (on the
// host's loopback for the push, and on the node's, in the cluster's
// network namespace, for the pull), and the node pulls it by digest. The
// interpreter image is imported into the node first, so that the pull
// within the boot timeout takes only the derived image's manifest, config
// and new layers.
func TestArtifacts(t *testing.T) {
	img := pythonImage(t)
	reg := newTestRegistry(t)
	c := startCluster(t)
	c.useRegistry(t, reg) // the node's containerd speaks plain HTTP to it
	addr := c.registry

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	c.ensureNamespace(ctx, t)
	c.importImage(ctx, t, img)

	repo := addr + "/skillbox"
	k, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig, Registry: repo}})
	if err != nil {
		t.Fatal(err)
	}
	k.artifacts = NewArtifacts(t.TempDir())

	script := `import sys, depmod
print(depmod.V, open("/skill/data/msg.txt").read().strip())
print(open("/proc/version").read().strip())
try:
    open("/skill/new", "w")
    print("skill writable")
except OSError:
    print("skill read-only")
`
	deps := writeTree(t, t.TempDir(), map[string]string{"python/depmod.py": "V = 'dep-1'\n"})
	run := func(t *testing.T, msg string) (*runtime.Result, string) {
		t.Helper()
		skill := writeTree(t, t.TempDir(), map[string]string{"SKILL.md": "---\nname: art\n---\n", "scripts/x.py": script, "data/msg.txt": msg})
		job := runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("kube-art-%d", time.Now().UnixNano()), Image: img, SkillDir: skill, DepsDir: deps},
			Invocation: runtime.Invocation{Args: []string{"python3", runtime.SkillMount + "/scripts/x.py"}, ModuleEnv: runtime.WithDepsPath(runtime.ModulePathEnv("python", "scripts/x.py"), "python"), Limits: runtime.Limits{Timeout: time.Minute}},
		}
		derived, err := k.artifacts.Build(job)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res, err := k.Run(ctx, job)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		t.Logf("run of %s in %s: reason %s exit %d\nstdout %q\nstderr %q", derived.Digest, time.Since(start).Round(10*time.Millisecond),
			res.Reason, res.ExitCode, res.Stdout, res.Stderr)
		noPodsLeft(ctx, t, c, job.Sandbox.ID)
		return res, derived.Digest
	}
	check := func(t *testing.T, res *runtime.Result, d, msg string) {
		t.Helper()
		lines := strings.Split(string(res.Stdout), "\n")
		if res.Reason != runtime.ReasonExit || res.ExitCode != 0 || len(lines) < 3 || lines[0] != "dep-1 "+msg || lines[2] != "skill read-only" {
			t.Errorf("exit %d stdout %q, want the dependency's and the skill's words and a read-only skill", res.ExitCode, res.Stdout)
		}
		if len(lines) < 2 || !strings.Contains(strings.ToLower(lines[1]), "gvisor") {
			t.Errorf("the job's kernel %q is not gVisor's", lines[1:])
		}
		if !slices.Contains(reg.servedManifests(), "skillbox/"+img.Name+"@"+d) {
			t.Errorf("the node did not pull %s/%s@%s from the registry (manifests served: %q)", repo, img.Name, d, reg.servedManifests())
		}
	}

	var first string
	t.Run("SkillAndDeps", func(t *testing.T) {
		res, d := run(t, "hello")
		check(t, res, d, "hello")
		first = d
	})
	t.Run("ChangedSkillByte", func(t *testing.T) {
		res, d := run(t, "hellp")
		if d == first {
			t.Fatalf("a changed skill byte kept the digest %s", d)
		}
		check(t, res, d, "hellp")
	})
	t.Run("NoRegistry", func(t *testing.T) {
		// Without a registry, a derived image the node lacks is not
		// pulled, and the error says how to get it there.
		k2, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig}})
		if err != nil {
			t.Fatal(err)
		}
		k2.artifacts = NewArtifacts(t.TempDir())
		skill := writeTree(t, t.TempDir(), map[string]string{"scripts/x.py": "print(1)\n"})
		job := runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("kube-art-%d", time.Now().UnixNano()), Image: img, SkillDir: skill},
			Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/x.py"}, Limits: runtime.Limits{Timeout: time.Minute}},
		}
		_, err = k2.Run(ctx, job)
		t.Logf("run: %v", err)
		if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "registry =") || !strings.Contains(err.Error(), "import") {
			t.Errorf("run of a derived image without a registry: %v, want ErrUnavailable naming the registry option and the import", err)
		}
		noPodsLeft(ctx, t, c, job.Sandbox.ID)
	})
}
