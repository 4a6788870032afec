package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	names := Names()
	for _, want := range []string{"runc", "runsc"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s not registered: %v", want, names)
		}
	}
	if _, err := New("nope", Options{}); !errors.Is(err, ErrUnknownRuntime) {
		t.Errorf("unknown runtime: %v", err)
	}
	rt, err := New("runsc", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.(*Runsc); !ok || rt.Name() != "runsc" {
		t.Errorf("New(runsc) = %T %s", rt, rt.Name())
	}
	rt, err = New("runc", Options{})
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
	if h := runscInstallHint(""); !strings.Contains(h, RunscInstallCommand) || !strings.Contains(h, PinnedRunscVersion) {
		t.Errorf("pinned runsc hint %q", h)
	}
	if h := runscInstallHint("/usr/bin/runsc"); h != "apt-get install runsc" {
		t.Errorf("Debian runsc hint %q", h)
	}
	r, _ := NewRunsc(Options{})
	if r.opts.Binary != PinnedRunscPath() || r.opts.Platform != PinnedRunscPlatform || r.opts.StateDir != RunscStateDir("") {
		t.Errorf("default runsc options %+v", r.opts)
	}
	r, _ = NewRunsc(Options{Binary: "/usr/bin/runsc"})
	if r.opts.Platform != "" || r.opts.StateDir != "/run/skillbox/runsc" {
		t.Errorf("Debian runsc options %+v", r.opts)
	}
	for _, name := range []string{"runsc", "runc"} {
		rt, err := New(name, Options{Binary: "/nonexistent/" + name, RunDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = rt.Version(context.Background())
		hint := "apt-get install runc"
		if name == "runsc" {
			hint = "install runsc at /nonexistent/runsc"
		}
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), hint) {
			t.Errorf("%s Version: %v", name, err)
		}
		_, err = rt.Run(context.Background(), goldenJob())
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s Run: %v", name, err)
		}
		if err := Sweep(context.Background(), rt); !errors.Is(err, ErrUnavailable) {
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
	if a := seccompFor("amd64").Architectures; len(a) != 1 || a[0] != "SCMP_ARCH_X86_64" {
		t.Errorf("amd64 %v", a)
	}
	if a := seccompFor("arm64").Architectures; len(a) != 1 || a[0] != "SCMP_ARCH_AARCH64" {
		t.Errorf("arm64 %v", a)
	}
	// Each call is a fresh copy that callers may change.
	a, b := DefaultSeccomp(), DefaultSeccomp()
	a.Syscalls[0].Names[0] = "changed"
	if b.Syscalls[0].Names[0] == "changed" {
		t.Error("DefaultSeccomp shares state between calls")
	}
}
