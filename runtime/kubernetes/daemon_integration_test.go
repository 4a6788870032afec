//go:build integration

package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// TestDaemonStartSweeps starts the real daemon (SKILLBOX_BIN serve) on the
// kubernetes runtime with a pod of its instance left by a dead process (as
// a daemon killed with -9 leaves its runs' pods, TestSweepAfterKill): the
// daemon's start sweeps it, and spares the pod of another instance.
func TestDaemonStartSweeps(t *testing.T) {
	bin := os.Getenv("SKILLBOX_BIN")
	if bin == "" {
		runtimetest.SkipUnlessRequired(t, "SKILLBOX_BIN names no skillbox binary (go build -o bin/skillbox ./cmd/skillbox)")
		return
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DefaultNamespace}}
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	dir := t.TempDir()
	state := filepath.Join(dir, "kubernetes")
	instance, err := loadInstance(state)
	if err != nil {
		t.Fatal(err)
	}
	pods := c.cs.CoreV1().Pods(DefaultNamespace)
	// No pid reaches pid_max (at most 2^22): the owner is dead.
	dead := fmt.Sprintf("%d-1", 1<<22)
	createLabelledPods(ctx, t, pods, map[string]map[string]string{
		"daemon-leftover":       {LabelManagedBy: ManagedBy, LabelInstance: instance, LabelOwner: dead},
		"daemon-other-instance": {LabelManagedBy: ManagedBy, LabelInstance: strings.Repeat("1", 32), LabelOwner: dead},
	})

	skills := filepath.Join(dir, "skills")
	if err := os.MkdirAll(skills, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "skillbox.sock")
	cfg := filepath.Join(dir, "skillbox.hcl")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `daemon {
  runtime   = "kubernetes"
  socket    = %q
  state_dir = %q
  audit_dir = %q
}
runtime "kubernetes" {
  kubeconfig = %q
  state_dir  = %q
}
skills {
  roots = [%q]
}
`, socket, filepath.Join(dir, "state"), filepath.Join(dir, "audit"), c.kubeconfig, state, skills), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	daemon := exec.Command(bin, "serve", "--config", cfg)
	daemon.Stdout, daemon.Stderr = &out, &out
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	defer func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = daemon.Process.Kill()
			<-exited
		}
		t.Logf("daemon:\n%s", out.String())
	}()
	for {
		_, err := pods.Get(ctx, "daemon-leftover", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the daemon ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("the leftover pod is still there after the daemon's start: %v", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	for start := time.Now(); ; {
		_, err := os.Stat(socket)
		if err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the daemon swept, but serves no socket: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := pods.Get(ctx, "daemon-other-instance", metav1.GetOptions{}); err != nil {
		t.Errorf("the pod of another instance: %v (the daemon swept it)", err)
	}
}
