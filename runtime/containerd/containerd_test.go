package containerd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

func TestNewHandlers(t *testing.T) {
	pinned := runtime.PinnedRunscPath()
	for _, tc := range []struct {
		name     string
		opts     runtime.Options
		handler  string
		binary   string
		gvisor   bool
		platform string
		err      bool
	}{
		{name: "default is gVisor's shim", handler: HandlerRunsc, binary: pinned, gvisor: true, platform: runtime.PinnedRunscPlatform},
		{name: "runc v2 shim runs runc", opts: runtime.Options{Backend: Options{Handler: HandlerRuncV2}}, handler: HandlerRuncV2, binary: "runc"},
		{name: "runc v2 shim runs the pinned runsc", opts: runtime.Options{Backend: Options{Handler: HandlerRuncV2, Binary: pinned}},
			handler: HandlerRuncV2, binary: pinned, gvisor: true, platform: runtime.PinnedRunscPlatform},
		{name: "another runsc keeps its platform", opts: runtime.Options{Backend: Options{Handler: HandlerRuncV2, Binary: "/usr/bin/runsc"}},
			handler: HandlerRuncV2, binary: "/usr/bin/runsc", gvisor: true},
		{name: "unknown handler", opts: runtime.Options{Backend: Options{Handler: "io.containerd.kata.v2"}}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.opts)
			if tc.err {
				if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), HandlerRunsc) {
					t.Fatalf("error %v, want ErrUnavailable naming the choices", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.handler != tc.handler || c.binary != tc.binary || c.gvisor != tc.gvisor || c.platform != tc.platform {
				t.Errorf("handler %s binary %s gvisor %v platform %q", c.handler, c.binary, c.gvisor, c.platform)
			}
			if c.Address() != DefaultAddress || c.Namespace() != DefaultNamespace {
				t.Errorf("address %s namespace %s", c.Address(), c.Namespace())
			}
			// gVisor's sandboxes get runsc's spec options, runc's its own.
			if c.gvisor != (c.specOpts.UserNS == nil && !c.specOpts.Seccomp) {
				t.Errorf("spec options %+v for gvisor %v", c.specOpts, c.gvisor)
			}
		})
	}
}

func TestRunscConfigAndWrapper(t *testing.T) {
	dir := t.TempDir()
	c, err := New(runtime.Options{Backend: Options{StateDir: dir, Binary: "/opt/runsc", Platform: "systrap", Flags: []string{"--debug", "--overlay2=none"}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.runscConfig(false)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(p)
	for _, want := range []string{`binary_name = "/opt/runsc"`, `root = "` + filepath.Join(dir, "runsc") + `"`,
		`"network" = "none"`, `"platform" = "systrap"`, `"debug" = "true"`, `"overlay2" = "none"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("config lacks %s:\n%s", want, raw)
		}
	}
	if p2, _ := c.runscConfig(true); p2 == p {
		t.Error("network and no-network sandboxes share a config")
	}
	w, err := c.runscWrapper(false)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(w)
	if want := `exec '/opt/runsc' '--debug=true' '--network=none' '--overlay2=none' '--platform=systrap' "$@"`; !strings.Contains(string(raw), want) {
		t.Errorf("wrapper:\n%s\nwant %s", raw, want)
	}
	if st, _ := os.Stat(w); st.Mode().Perm() != 0o700 {
		t.Errorf("wrapper mode %v", st.Mode())
	}
}

func TestUnreachableDaemon(t *testing.T) {
	c, err := New(runtime.Options{Backend: Options{Address: filepath.Join(t.TempDir(), "none.sock")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Version(context.Background())
	if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "none.sock") {
		t.Fatalf("error %v, want ErrUnavailable naming the socket", err)
	}
	if _, err := c.Run(context.Background(), runtime.Job{Sandbox: runtime.SandboxSpec{ID: "x", RootFS: "/"}, Invocation: runtime.Invocation{Args: []string{"true"}}}); !errors.Is(err, runtime.ErrUnavailable) {
		t.Errorf("Run: %v, want ErrUnavailable", err)
	}
}

func TestRegistered(t *testing.T) {
	rt, err := runtime.New(Name, runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Name() != Name {
		t.Errorf("name %s", rt.Name())
	}
}
