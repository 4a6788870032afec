package ocicli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
)

func TestRegistry(t *testing.T) {
	names := runtime.Names()
	for _, want := range []string{"runc", "runsc"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s not registered: %v", want, names)
		}
	}
	if _, err := runtime.New("nope", runtime.Options{}); !errors.Is(err, runtime.ErrUnknownRuntime) {
		t.Errorf("unknown runtime: %v", err)
	}
	rt, err := runtime.New("runsc", runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.(*Runsc); !ok || rt.Name() != "runsc" {
		t.Errorf("New(runsc) = %T %s", rt, rt.Name())
	}
	rt, err = runtime.New("runc", runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.(*Runc); !ok || rt.Name() != "runc" {
		t.Errorf("New(runc) = %T %s", rt, rt.Name())
	}
}

// A missing binary is ErrUnavailable with the install hint, from Version,
// Run and Sweep alike; nothing falls back to another runtime.
func TestMissingBinary(t *testing.T) {
	// The pinned runsc's hint names the command that installs it.
	if h := runtime.RunscInstallHint(""); !strings.Contains(h, runtime.RunscInstallCommand) || !strings.Contains(h, runtime.PinnedRunscVersion) {
		t.Errorf("pinned runsc hint %q", h)
	}
	if h := runtime.RunscInstallHint("/usr/bin/runsc"); h != "apt-get install runsc" {
		t.Errorf("Debian runsc hint %q", h)
	}
	r, _ := NewRunsc(runtime.Options{})
	if r.ro.Binary != runtime.PinnedRunscPath() || r.ro.Platform != runtime.PinnedRunscPlatform || r.ro.StateDir != runtime.RunscStateDir("") {
		t.Errorf("default runsc options %+v", r.ro)
	}
	r, _ = NewRunsc(runtime.Options{Backend: RunscOptions{Binary: "/usr/bin/runsc"}})
	if r.ro.Platform != "" || r.ro.StateDir != "/run/skillbox/runsc" {
		t.Errorf("Debian runsc options %+v", r.ro)
	}
	for _, name := range []string{"runsc", "runc"} {
		rt, err := runtime.New(name, runtime.Options{Settings: runtime.Settings{"binary": "/nonexistent/" + name}, RunDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = rt.Version(context.Background())
		hint := "apt-get install runc"
		if name == "runsc" {
			hint = "install runsc at /nonexistent/runsc"
		}
		if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), hint) {
			t.Errorf("%s Version: %v", name, err)
		}
		_, err = rt.Run(context.Background(), goldenJob())
		if !errors.Is(err, runtime.ErrUnavailable) {
			t.Errorf("%s Run: %v", name, err)
		}
		if err := runtime.Sweep(context.Background(), rt); !errors.Is(err, runtime.ErrUnavailable) {
			t.Errorf("%s Sweep: %v", name, err)
		}
	}
}

func TestLogErrors(t *testing.T) {
	dir := t.TempDir()
	runscLog := `{"msg":"Error setting up root FS","level":"error","time":"t"}{"msg":"just info","level":"info","time":"t"}{"msg":"running container: creating container: EOF","level":"error","time":"t"}`
	runcLog := `{"level":"warning","msg":"something odd","time":"t"}
{"level":"error","msg":"runc run failed: unable to start container process: exec: \"nope\": executable file not found in $PATH","time":"t"}
`
	for name, tc := range map[string]struct{ log, want string }{
		"runsc": {runscLog, "running container: creating container: EOF"},
		"runc":  {runcLog, `runc run failed: unable to start container process: exec: "nope": executable file not found in $PATH`},
		"clean": {`{"level":"info","msg":"fine"}`, ""},
		"empty": {"", ""},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := logErrors(p); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
	if got := logErrors(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing log: %q", got)
	}
}

func TestSeccompArches(t *testing.T) {
	if a := oci.SeccompFor("amd64").Architectures; len(a) != 1 || a[0] != "SCMP_ARCH_X86_64" {
		t.Errorf("amd64 %v", a)
	}
	if a := oci.SeccompFor("arm64").Architectures; len(a) != 1 || a[0] != "SCMP_ARCH_AARCH64" {
		t.Errorf("arm64 %v", a)
	}
	// Each call is a fresh copy that callers may change.
	a, b := oci.DefaultSeccomp(), oci.DefaultSeccomp()
	a.Syscalls[0].Names[0] = "changed"
	if b.Syscalls[0].Names[0] == "changed" {
		t.Error("DefaultSeccomp shares state between calls")
	}
}

// goldenJob is oci's golden job (spec_test.go).
func goldenJob() runtime.Job {
	return runtime.Job{
		Sandbox:    runtime.SandboxSpec{ID: "skillbox-golden-1", RootFS: "/var/lib/skillbox/images/python/rootfs", SkillDir: "/srv/skills/pdf"},
		Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/extract.py", "in.pdf"}, Env: []string{"FOO=bar", "LANG=de_DE.UTF-8"}},
	}
}

// Rootless, runsc runs with --rootless and no cgroups, its spec is the
// rootless one, and it names what holds each limit; runc refuses.
func TestRootlessOptions(t *testing.T) {
	r, err := NewRunsc(runtime.Options{Rootless: true, RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--rootless", "--ignore-cgroups"} {
		if !slices.Contains(r.cli.global, flag) {
			t.Errorf("global flags %v lack %s", r.cli.global, flag)
		}
	}
	if !r.specOptions(runtime.Job{}).Rootless || !r.eng.rootless {
		t.Error("the rootless backend builds a root spec")
	}
	if err := r.setupCgroup("/skillbox/x", runtime.Limits{}); err != nil {
		t.Errorf("rootless makes no cgroup: %v", err)
	}
	by := r.enforcement()
	if by["memory"] != runtime.EnforcedBySkillboxPoll || by["pids"] != runtime.EnforcedByRlimit || by["cpus"] != runtime.EnforcedByNone {
		t.Errorf("rootless enforcement %v", by)
	}
	root, _ := NewRunsc(runtime.Options{})
	if slices.Contains(root.cli.global, "--rootless") || root.enforcement()["memory"] != runtime.EnforcedByCgroup {
		t.Errorf("root runsc: flags %v, enforcement %v", root.cli.global, root.enforcement())
	}
	if _, err := NewRunc(runtime.Options{Rootless: true}); !errors.Is(err, runtime.ErrUnavailable) {
		t.Errorf("runc rootless: want ErrUnavailable, got %v", err)
	}
}

// With a delegated cgroup, runsc rootless joins the run's cgroup under it
// (no --ignore-cgroups), and the kernel holds the limits.
func TestRootlessDelegatedOptions(t *testing.T) {
	const sub = "/user.slice/user@1000.service/app.slice/skillbox.scope"
	r, err := NewRunsc(runtime.Options{Rootless: true, RunDir: t.TempDir(), Delegated: &runtime.DelegatedCgroup{Path: sub}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(r.cli.global, "--ignore-cgroups") || !slices.Contains(r.cli.global, "--rootless") {
		t.Errorf("global flags %v", r.cli.global)
	}
	if o := r.specOptions(runtime.Job{Sandbox: runtime.SandboxSpec{ID: "skillbox-x"}}); !o.Rootless || o.CgroupsPath != sub+"/skillbox-x" {
		t.Errorf("spec options %+v", o)
	}
	by := r.enforcement()
	if by["memory"] != runtime.EnforcedByCgroup || by["pids"] != runtime.EnforcedByCgroup || by["cpus"] != runtime.EnforcedByNone {
		t.Errorf("delegated without cpu: %v", by)
	}
	r, _ = NewRunsc(runtime.Options{Rootless: true, RunDir: t.TempDir(), Delegated: &runtime.DelegatedCgroup{Path: sub, CPU: true}})
	if r.enforcement()["cpus"] != runtime.EnforcedByCgroup {
		t.Errorf("delegated with cpu: %v", r.enforcement())
	}
}
