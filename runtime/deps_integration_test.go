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

// A dependency layer is mounted read-only at runtime.DepsMount, on the
// module path, cold and warm, on every backend.
func TestDepsLayerMount(t *testing.T) {
	rootfs := testRootfs(t)
	layer := t.TempDir()
	if err := os.MkdirAll(filepath.Join(layer, "python", "depmod"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layer, "python", "depmod", "__init__.py"), []byte("X = 'from the layer'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{layer, filepath.Join(layer, "python")} {
		os.Chmod(dir, 0o755)
	}
	dir := makeSkill(t, map[string]string{"scripts/use.py": "import depmod\nprint(depmod.X)\n" +
		"try:\n    open('/opt/python/w', 'w')\n    print('wrote')\nexcept OSError as e:\n    print('refused', e.errno)\n"})
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			for _, mode := range []string{"cold", "warm"} {
				t.Run(mode, func(t *testing.T) {
					job := runtime.Job{
						Sandbox:    runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: dir, DepsDir: layer},
						Invocation: runtime.Invocation{Args: []string{"python3", runtime.SkillMount + "/scripts/use.py"}, ModuleEnv: runtime.WithDepsPath(runtime.ModulePathEnv("python", "scripts/use.py"), "python"), Limits: runtime.Limits{Timeout: 60 * time.Second}},
					}
					var res *runtime.Result
					var err error
					if mode == "cold" {
						res, err = rt.Run(context.Background(), job)
					} else {
						res, err = runWarm(t, rt, job)
					}
					if err != nil {
						t.Fatal(err)
					}
					out := string(res.Stdout)
					if res.ExitCode != 0 || !strings.Contains(out, "from the layer") || !strings.Contains(out, "refused") || strings.Contains(out, "wrote") {
						t.Errorf("exit %d stdout %q stderr %q", res.ExitCode, out, clip(res.Stderr))
					}
					assertClean(t, name, opts, job.Sandbox.ID)
				})
			}
		})
	}
}
