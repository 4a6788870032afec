package stack_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
)

// daemon { runtime = "kubernetes" } (or --runtime kubernetes) builds the
// engine on the kubernetes backend, which the stack registers; a cluster
// it cannot reach is the backend's error naming the cause, never a run on
// another runtime.
func TestKubernetesRuntimeSelected(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-kubeconfig")
	// A cluster nothing listens for.
	unreachable := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src, flag, want string
	}{
		{name: "config", src: "daemon {\n  runtime = \"kubernetes\"\n}\nruntime \"kubernetes\" {\n  kubeconfig = \"" + missing + "\"\n}\n", want: missing},
		{name: "flag", src: "runtime \"kubernetes\" {\n  kubeconfig = \"" + missing + "\"\n}\n", flag: "kubernetes", want: missing},
		{name: "unreachable", src: "runtime \"kubernetes\" {\n  kubeconfig = \"" + unreachable + "\"\n}\n", flag: "kubernetes", want: "https://127.0.0.1:1 unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := policy.Parse([]byte(tc.src), "k.hcl")
			if err != nil {
				t.Fatal(err)
			}
			cfg.Runtimes["kubernetes"].StateDir = t.TempDir()
			st, err := stack.New(context.Background(), stack.Options{Mode: stack.EngineOnly, Config: cfg, Runtime: tc.flag, ImageDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			rt := st.Engine().Runtime()
			if rt.Name() != "kubernetes" {
				t.Fatalf("runtime %s, want kubernetes", rt.Name())
			}
			_, err = rt.Version(context.Background())
			if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("version: %v, want ErrUnavailable naming %s", err, tc.want)
			}
		})
	}
}
