//go:build integration

package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// The test binary is also the probe RunProbe runs as another uid.
func init() { runtimetest.ProbeIfAsked() }

// TestRunFilesPrivate runs a job holding secrets (an input file, an env
// value, a file it writes to its outputs) on the test cluster and, while
// it runs, has another real uid walk everything of the run on the host:
// the backend's state dir (instance id, artifacts), its run dir (where
// outputs are copied back) and the whole test cluster's dir (the node's
// containerd and kubelet), plus every process's root, cwd, descriptors and
// environment. It must reach no secret and list or read nothing of the run.
// The job's data travels over exec streams into the pod's memory-backed
// volumes, so none of it should exist on the host's filesystems at all.
func TestRunFilesPrivate(t *testing.T) {
	img := pythonImage(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	c.ensureNamespace(ctx, t)
	c.importImage(ctx, t, img)

	base := t.TempDir()
	stateDir, runDir := filepath.Join(base, "state"), filepath.Join(base, "runs")
	if err := os.Mkdir(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	k, err := New(runtime.Options{RunDir: runDir, Backend: Options{Kubeconfig: c.kubeconfig, StateDir: stateDir}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close(context.Background())

	inputSecret, envSecret := "INPUT-SECRET-"+rand.Text(), "ENV-SECRET-"+rand.Text()
	script := `import os, sys, time
data = open("/work/input.txt").read()
os.makedirs("/work/outputs", exist_ok=True)
open("/work/outputs/out.txt", "w").write(data + os.environ["RUN_SECRET"])
print("ready", flush=True)
time.sleep(600)
`
	ready := make(chan struct{})
	var once bool
	job := runtime.Job{
		Sandbox: runtime.SandboxSpec{
			ID:    fmt.Sprintf("kube-private-%d", time.Now().UnixNano()),
			Image: img,
		},
		Invocation: runtime.Invocation{
			Args:   []string{"python3", "-c", script},
			Env:    []string{"RUN_SECRET=" + envSecret},
			Files:  []runtime.InputFile{{Name: "input.txt", Data: []byte(inputSecret + "\n"), Mode: 0o600}},
			Limits: runtime.Limits{Timeout: 5 * time.Minute},
			Stdout: sinkFunc(func(p []byte) (int, error) {
				if !once && strings.Contains(string(p), "ready") {
					once = true
					close(ready)
				}
				return len(p), nil
			}),
		},
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	type outcome struct {
		res *runtime.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := k.Run(runCtx, job)
		done <- outcome{res, err}
	}()
	select {
	case <-ready:
	case o := <-done:
		t.Fatalf("run ended before it was ready: %+v %v", o.res, o.err)
	case <-time.After(3 * time.Minute):
		t.Fatal("run not ready after 3 minutes")
	}

	pod, err := c.cs.CoreV1().Pods(DefaultNamespace).Get(ctx, podName(job.Sandbox.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the run's pod: %v", err)
	}
	kubeDir := filepath.Dir(c.kubeconfig)
	// The control: a file the probe can read, holding a secret of its own,
	// which it must report.
	probeBin := runtimetest.ProbeBinary(t)
	canary, canarySecret := filepath.Join(filepath.Dir(probeBin), "canary"), "CANARY-"+rand.Text()
	if err := os.WriteFile(canary, []byte(canarySecret), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := runtimetest.ProbeSpec{
		Walk:    []string{stateDir, runDir, kubeDir},
		Paths:   []string{filepath.Join(stateDir, "artifacts"), canary},
		IDs:     []string{job.Sandbox.ID, pod.Name, string(pod.UID)},
		Names:   []string{"input.txt", "outputs/out.txt", "run.sh"},
		Secrets: []string{inputSecret, envSecret, canarySecret},
	}
	for _, uid := range []uint32{65534, 65533} {
		sawCanary := false
		for _, h := range runtimetest.RunProbe(t, probeBin, uid, spec) {
			switch {
			case h.Path == canary:
				sawCanary = sawCanary || h.Secret
			case h.Secret || h.Op != "stat":
				t.Errorf("uid %d reached %s %s (secret %v)", uid, h.Op, h.Path, h.Secret)
			default:
				// Seeing that a directory named for the run exists (the
				// kubelet's pod dir, by its uid) shows nothing of it.
				t.Logf("uid %d may stat %s", uid, h.Path)
			}
		}
		if !sawCanary {
			t.Errorf("uid %d: the probe did not read its control file %s", uid, canary)
		}
	}

	// Not even root finds the job's data on the host's filesystems: it is
	// only in the pod's memory-backed volumes, in the node's own mount
	// namespace (the cluster's etcd, the node's containerd and kubelet
	// dirs, the backend's state and run dirs are searched).
	for _, root := range []string{stateDir, runDir, kubeDir} {
		for _, hit := range filesHolding(t, root, inputSecret, envSecret) {
			t.Errorf("the job's data is on the host's disk: %s", hit)
		}
	}

	stop()
	select {
	case o := <-done:
		switch {
		case o.err != nil && !errors.Is(o.err, context.Canceled):
			t.Fatal(o.err)
		case o.err == nil && o.res.Reason != runtime.ReasonKilled:
			t.Errorf("run ended %s (exit %d, stderr %q), want it killed", o.res.Reason, o.res.ExitCode, o.res.Stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("run not stopped two minutes after its cancel")
	}
	noPodsLeft(ctx, t, c, job.Sandbox.ID)
}

// filesHolding lists the regular files under root (up to 256 MiB each)
// that hold any of secrets.
func filesHolding(t *testing.T, root string, secrets ...string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		data, _ := io.ReadAll(io.LimitReader(f, 256<<20))
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				hits = append(hits, path)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}
