//go:build integration

package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// TestBackend runs jobs on the kubernetes backend against the test
// cluster, with the python image of the image store imported into the
// node by digest.
func TestBackend(t *testing.T) {
	img := pythonImage(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()

	k, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig}})
	if err != nil {
		t.Fatal(err)
	}
	// Without its namespace the backend says so, and runs nothing (a
	// namespace no test makes: the default one may exist already).
	const absent = "skillbox-test-absent"
	noNS, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig, Namespace: absent}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noNS.Version(ctx); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "namespace "+absent) {
		t.Fatalf("Version without the namespace: %v, want ErrUnavailable naming it", err)
	}
	c.ensureNamespace(ctx, t)
	v, err := k.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("version: %s", v)

	c.importImage(ctx, t, img)

	host, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, job runtime.Job) *runtime.Result {
		t.Helper()
		job.Sandbox.ID = fmt.Sprintf("kube-test-%d", time.Now().UnixNano())
		if job.Sandbox.Image.IsZero() {
			job.Sandbox.Image = img
		}
		start := time.Now()
		res, err := k.Run(ctx, job)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		t.Logf("run in %s: reason %s exit %d, %s\nstdout %q\nstderr %q", time.Since(start).Round(10*time.Millisecond),
			res.Reason, res.ExitCode, res.Duration.Round(time.Millisecond), res.Stdout, res.Stderr)
		noPodsLeft(ctx, t, c, job.Sandbox.ID)
		return res
	}

	t.Run("ExitCodeAndKernel", func(t *testing.T) {
		res := run(t, runtime.Job{
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", "import platform,sys; print(open('/proc/version').read()); sys.exit(3)"}, Limits: runtime.Limits{Timeout: time.Minute}},
		})
		if res.Reason != runtime.ReasonExit || res.ExitCode != 3 || res.OutputsSkipped != nil {
			t.Errorf("reason %s exit %d outputs skipped %q, want exit 3 and nothing skipped", res.Reason, res.ExitCode, res.OutputsSkipped)
		}
		version, _, _ := strings.Cut(string(res.Stdout), "\n")
		if strings.TrimSpace(version) == strings.TrimSpace(string(host)) || !strings.Contains(strings.ToLower(version), "gvisor") {
			t.Errorf("the job's /proc/version %q is not gVisor's (host: %q)", version, strings.TrimSpace(string(host)))
		}
	})

	t.Run("StdinEnvAndConfinement", func(t *testing.T) {
		script := `import os, sys
print(sys.stdin.read(), os.environ.get("A"), os.getcwd(), os.getuid(), sorted(os.environ))
print("err", file=sys.stderr)
try:
    open("/rootfs-write", "w")
    print("rootfs writable")
except OSError:
    print("rootfs read-only")
open("/work/x", "w").write("x")
print(os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"))
print(open("/proc/self/status").read().split("CapEff:")[1].split()[0])`
		res := run(t, runtime.Job{
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", script}, Stdin: []byte("in"), Env: []string{"A=b"}, Limits: runtime.Limits{Timeout: time.Minute}},
		})
		want := "in b /work 65534 ['A', 'HOME', 'LANG', 'PATH']\nrootfs read-only\nFalse\n0000000000000000\n"
		if res.ExitCode != 0 || string(res.Stdout) != want || string(res.Stderr) != "err\n" {
			t.Errorf("exit %d stdout %q stderr %q, want stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr, want, "err\n")
		}
		// /work/x comes back.
		if len(res.Outputs) != 1 || res.Outputs[0].Path != "x" || string(res.Outputs[0].Data) != "x" || res.OutputsSkipped != nil {
			t.Errorf("outputs %v skipped %q, want x", res.Outputs, res.OutputsSkipped)
		}
	})

	t.Run("InputsAndOutputs", func(t *testing.T) {
		script := `import os
data = open("/work/in.txt").read()
open("/work/outputs/a.txt", "w").write(data.upper())
open("/work/b.bin", "wb").write(bytes(range(256)))
open("/work/outputs/big.bin", "wb").write(b"z" * 1001)
os.remove("/work/data/gone.txt")
os.symlink("/etc/passwd", "/work/link")
print(sorted(os.listdir("/work")), oct(os.stat("/work/run.sh").st_mode & 0o777), os.readlink("/work/data/in-link"))`
		res := run(t, runtime.Job{
			Invocation: runtime.Invocation{
				Args:   []string{"python3", "-c", script},
				Limits: runtime.Limits{Timeout: time.Minute, OutputFileBytes: 1000},
				Files: []runtime.InputFile{
					{Name: "in.txt", Data: []byte("hello\n")},
					{Name: "run.sh", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
					{Name: "data/keep.txt", Data: []byte("keep")},
					{Name: "data/gone.txt", Data: []byte("gone")},
					{Name: "data/in-link", Kind: runtime.InputSymlink, Target: "keep.txt"},
				},
			},
		})
		wantOut := "['b.bin', 'data', 'in.txt', 'link', 'outputs', 'run.sh'] 0o755 keep.txt\n"
		if res.Reason != runtime.ReasonExit || res.ExitCode != 0 || string(res.Stdout) != wantOut {
			t.Fatalf("reason %s exit %d stdout %q stderr %q, want exit 0 and %q", res.Reason, res.ExitCode, res.Stdout, res.Stderr, wantOut)
		}
		got := map[string]string{}
		for _, o := range res.Outputs {
			got[o.Path] = string(o.Data)
		}
		want := map[string]string{"outputs/a.txt": "HELLO\n", "b.bin": string(func() []byte {
			b := make([]byte, 256)
			for i := range b {
				b[i] = byte(i)
			}
			return b
		}())}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("outputs %q, want %q", got, want)
		}
		if !res.OutputsTruncated || res.OutputsTruncatedBy != runtime.CapOutputFileBytes || res.OutputsOmittedFiles != 1 || res.OutputsOmittedBytes != 1001 {
			t.Errorf("truncated %v by %q omitted %d files %d bytes, want outputs/big.bin left out by %s", res.OutputsTruncated, res.OutputsTruncatedBy,
				res.OutputsOmittedFiles, res.OutputsOmittedBytes, runtime.CapOutputFileBytes)
		}
		skipped := strings.Join(res.OutputsSkipped, "\n")
		if !strings.Contains(skipped, "outputs/big.bin: 1001 bytes") || !strings.Contains(skipped, "link: symlink, not followed") || strings.Contains(skipped, "in-link") {
			t.Errorf("skipped %q, want outputs/big.bin and link named, and not the input link", res.OutputsSkipped)
		}
		if fmt.Sprint(res.Deleted) != "[data/gone.txt]" {
			t.Errorf("deleted %q, want data/gone.txt", res.Deleted)
		}
	})

	t.Run("EnvIntactAndNotInURLs", func(t *testing.T) {
		values := []string{"with  spaces", `q'uo"te ' "`, "new\nline\n", "a=b=c", "$(id) `id` ${HOME}", "-i"}
		var env []string
		for i, v := range values {
			env = append(env, fmt.Sprintf("V%d=%s", i, v))
		}
		var urls []string
		traceExec = func(u *url.URL) { urls = append(urls, u.String()) }
		defer func() { traceExec = nil }()
		res := run(t, runtime.Job{
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", "import json, os, sys; json.dump([os.environ.get('V%d' % i) for i in range(6)] + sys.argv[1:], sys.stdout)",
				"arg with 'quotes'", "a=b"}, Env: env, Limits: runtime.Limits{Timeout: time.Minute}},
		})
		var got []string
		if err := json.Unmarshal(res.Stdout, &got); err != nil {
			t.Fatalf("stdout %q: %v", res.Stdout, err)
		}
		if want := append(slices.Clone(values), "arg with 'quotes'", "a=b"); !slices.Equal(got, want) {
			t.Errorf("env and args\n got %q\nwant %q", got, want)
		}
		if len(urls) != 4 {
			t.Errorf("%d execs, want 4 (deliver, job, stop, collect): %q", len(urls), urls)
		}
		for _, u := range urls {
			dec, _ := url.QueryUnescape(u)
			for _, bad := range []string{"V0", "V3", "a=b=c", "with", "quo", "python3"} {
				if strings.Contains(u, bad) || strings.Contains(dec, bad) {
					t.Errorf("exec URL %s holds %q of the job", u, bad)
				}
			}
		}
		t.Logf("exec URLs: %q", urls)
	})

	t.Run("PodDeletedMidRun", func(t *testing.T) {
		job := runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("kube-test-%d", time.Now().UnixNano()), Image: img},
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", "import time; print('up', flush=True); time.sleep(60)"}, Limits: runtime.Limits{Timeout: time.Minute}},
		}
		deleted := make(chan error, 1)
		var once sync.Once
		job.Invocation.Stdout = sinkFunc(func(p []byte) (int, error) {
			once.Do(func() {
				go func() {
					zero := int64(0)
					deleted <- c.cs.CoreV1().Pods(DefaultNamespace).Delete(ctx, podName(job.Sandbox.ID), metav1.DeleteOptions{GracePeriodSeconds: &zero})
				}()
			})
			return len(p), nil
		})
		start := time.Now()
		res, err := k.Run(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-deleted; err != nil {
			t.Fatalf("delete the pod: %v", err)
		}
		t.Logf("run in %s: reason %s exit %d stdout %q skipped %q", time.Since(start).Round(10*time.Millisecond), res.Reason, res.ExitCode, res.Stdout, res.OutputsSkipped)
		if res.Reason != runtime.ReasonKilled || string(res.Stdout) != "up\n" {
			t.Errorf("reason %s exit %d stdout %q, want killed after up", res.Reason, res.ExitCode, res.Stdout)
		}
		if d := time.Since(start); d > 45*time.Second {
			t.Errorf("a run whose pod was deleted took %s", d)
		}
		noPodsLeft(ctx, t, c, job.Sandbox.ID)
	})

	t.Run("OutputCap", func(t *testing.T) {
		res := run(t, runtime.Job{
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", "import sys, time\nwhile True: sys.stdout.write('x' * 4096); sys.stdout.flush()"}, Limits: runtime.Limits{Timeout: time.Minute, StdoutBytes: 1000}},
		})
		if res.Reason != runtime.ReasonOutputCap || !res.StdoutTruncated || len(res.Stdout) != 1000 {
			t.Errorf("reason %s truncated %v %d bytes, want output_cap, 1000 bytes", res.Reason, res.StdoutTruncated, len(res.Stdout))
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		start := time.Now()
		res := run(t, runtime.Job{Invocation: runtime.Invocation{Args: []string{"sh", "-c", "echo t > /work/outputs/t.txt; sleep 60"}, Limits: runtime.Limits{Timeout: 3 * time.Second}}})
		if res.Reason != runtime.ReasonTimeout {
			t.Errorf("reason %s exit %d, want timeout", res.Reason, res.ExitCode)
		}
		// As the local backends do, what the job wrote before its
		// timeout comes back.
		if len(res.Outputs) != 1 || res.Outputs[0].Path != "outputs/t.txt" || string(res.Outputs[0].Data) != "t\n" {
			t.Errorf("outputs %v skipped %q, want outputs/t.txt", res.Outputs, res.OutputsSkipped)
		}
		if res.Duration < 3*time.Second {
			t.Errorf("the job ran %s, less than its timeout", res.Duration)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("a 3 s timeout took %s", d)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		job := runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("kube-test-%d", time.Now().UnixNano()), Image: img},
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", "import time; open('/work/outputs/c.txt', 'w').write('c'); print('up', flush=True); time.sleep(60)"}, Limits: runtime.Limits{Timeout: time.Minute}},
		}
		job.Invocation.Stdout = sinkFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })
		start := time.Now()
		res, err := k.Run(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("run in %s: reason %s exit %d stdout %q", time.Since(start).Round(10*time.Millisecond), res.Reason, res.ExitCode, res.Stdout)
		if res.Reason != runtime.ReasonKilled || string(res.Stdout) != "up\n" {
			t.Errorf("reason %s stdout %q, want killed after up", res.Reason, res.Stdout)
		}
		// As the local backends do, what the job wrote before the cancel
		// comes back.
		if len(res.Outputs) != 1 || res.Outputs[0].Path != "outputs/c.txt" || string(res.Outputs[0].Data) != "c" {
			t.Errorf("outputs %v skipped %q, want outputs/c.txt", res.Outputs, res.OutputsSkipped)
		}
		noPodsLeft(context.WithoutCancel(ctx), t, c, job.Sandbox.ID)
	})

	t.Run("Memory", func(t *testing.T) {
		res := run(t, runtime.Job{
			Sandbox:    runtime.SandboxSpec{Limits: runtime.Limits{MemoryBytes: 128 << 20}},
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", "b = bytearray(1 << 30); print(len(b))"}, Limits: runtime.Limits{Timeout: time.Minute}},
		})
		// The kernel kills the sandbox at the pod's memory limit, and
		// the kubelet reports its container OOMKilled.
		if res.Reason != runtime.ReasonOOM || res.ExitCode != 137 {
			t.Errorf("1 GiB in 128 MiB: reason %s exit %d stderr %q, want oom, 137", res.Reason, res.ExitCode, res.Stderr)
		}
	})

	t.Run("WarmPool", func(t *testing.T) { testWarmPool(ctx, t, k, c, img) })

	t.Run("ImageNotOnNode", func(t *testing.T) {
		missing := img
		missing.Digest = "sha256:" + strings.Repeat("ab", 32)
		job := runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("kube-test-%d", time.Now().UnixNano()), Image: missing},
			Invocation: runtime.Invocation{Args: []string{"true"}, Limits: runtime.Limits{Timeout: time.Minute}},
		}
		ref, _ := ImageReference(missing)
		_, err := k.Run(ctx, job)
		t.Logf("run: %v", err)
		if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), ref) {
			t.Errorf("run with an image not on the node: %v, want ErrUnavailable naming %s", err, ref)
		}
		noPodsLeft(ctx, t, c, job.Sandbox.ID)
	})

	// Without the RuntimeClass, a backend runs nothing and says why. The
	// class is put back for the tests after this one.
	t.Run("NoRuntimeClass", func(t *testing.T) {
		rc, err := c.cs.NodeV1().RuntimeClasses().Get(ctx, RuntimeClass, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.cs.NodeV1().RuntimeClasses().Delete(ctx, RuntimeClass, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			back := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: rc.Name, Labels: rc.Labels, Annotations: rc.Annotations},
				Handler: rc.Handler, Overhead: rc.Overhead, Scheduling: rc.Scheduling}
			if _, err := c.cs.NodeV1().RuntimeClasses().Create(ctx, back, metav1.CreateOptions{}); err != nil {
				t.Errorf("put RuntimeClass %s back: %v (later tests of this run need it)", RuntimeClass, err)
			}
		})
		k, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = k.Run(ctx, runtime.Job{Sandbox: runtime.SandboxSpec{ID: "kube-test-no-class", Image: img}, Invocation: runtime.Invocation{Args: []string{"true"}}})
		t.Logf("run: %v", err)
		if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "no RuntimeClass gvisor") {
			t.Errorf("run without the RuntimeClass: %v, want ErrUnavailable naming it", err)
		}
		noPodsLeft(ctx, t, c, "kube-test-no-class")
	})
}

type sinkFunc func([]byte) (int, error)

func (f sinkFunc) Write(p []byte) (int, error) { return f(p) }

// noPodsLeft: no pod of skillbox's is left in the namespace.
func noPodsLeft(ctx context.Context, t *testing.T, c *testCluster, id string) {
	t.Helper()
	for _, p := range skillboxPods(ctx, t, c) {
		t.Errorf("after run %s: pod %s left (%s)", id, p.Name, p.Status.Phase)
	}
}

// skillboxPods lists the pods of skillbox's in the namespace.
func skillboxPods(ctx context.Context, t *testing.T, c *testCluster) []corev1.Pod {
	t.Helper()
	pods, err := c.cs.CoreV1().Pods(DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// skillboxPodNames is skillboxPods' names, sorted.
func skillboxPodNames(ctx context.Context, t *testing.T, c *testCluster) []string {
	t.Helper()
	var names []string
	for _, p := range skillboxPods(ctx, t, c) {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// pythonImage is the python image of the image store, as a job names it.
func pythonImage(t testing.TB) runtime.ImageRef {
	t.Helper()
	dir := os.Getenv("SKILLBOX_IMAGES")
	if dir == "" {
		dir = images.DefaultDir
	}
	store, err := images.OpenStore(dir, nil)
	if err != nil {
		runtimetest.SkipUnlessRequired(t, "no image store at %s: %v", dir, err)
	}
	img, err := store.Get("python")
	if err != nil {
		runtimetest.SkipUnlessRequired(t, "no python image in %s (skillbox images build python): %v", dir, err)
	}
	return runtime.ImageRef{Name: img.Name, Digest: img.Digest, Layout: store.LayoutDir()}
}
