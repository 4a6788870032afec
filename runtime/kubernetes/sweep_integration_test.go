//go:build integration

package kubernetes

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/skillbox/skillbox/runtime"
)

// Environment of the child process of TestSweepAfterKill.
const (
	envSweepChild = "SKILLBOX_TEST_SWEEP_CHILD" // the job's id
	envSweepState = "SKILLBOX_TEST_SWEEP_STATE"
	envSweepImage = "SKILLBOX_TEST_SWEEP_IMAGE" // name@digest
	envSweepKube  = "SKILLBOX_TEST_SWEEP_KUBECONFIG"
)

// TestSweepAfterKill: a process running a long job on the backend is
// killed with -9 mid-run; its pod stays. A new backend on the same state
// dir (the restarted daemon) sweeps it, and leaves the pods of another
// instance and of a live process of this one alone.
func TestSweepAfterKill(t *testing.T) {
	img := pythonImage(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	c.ensureNamespace(ctx, t)
	c.importImage(ctx, t, img)

	state := t.TempDir()
	instance, err := loadInstance(state)
	if err != nil {
		t.Fatal(err)
	}
	self, err := processOwner(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Pods the sweep must spare: this instance's of a live process (this
	// one), and another instance's whose owner is dead.
	pods := c.cs.CoreV1().Pods(DefaultNamespace)
	spared := map[string]map[string]string{
		"sweep-live-owner":     {LabelManagedBy: ManagedBy, LabelInstance: instance, LabelOwner: self},
		"sweep-other-instance": {LabelManagedBy: ManagedBy, LabelInstance: strings.Repeat("0", 32), LabelOwner: "1-1"},
	}
	createLabelledPods(ctx, t, pods, spared)

	// The child runs a job of ten minutes; it is killed once its pod runs
	// and the job is executing in it.
	id := "sweep-child"
	var out bytes.Buffer
	child := exec.Command(os.Args[0], "-test.run=^TestSweepChild$", "-test.v")
	child.Env = append(os.Environ(), envSweepChild+"="+id, envSweepState+"="+state,
		envSweepImage+"="+img.Name+"@"+img.Digest, envSweepKube+"="+c.kubeconfig)
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	name := podName(id)
	for running := false; !running; {
		select {
		case err := <-exited:
			t.Fatalf("child ended before its pod ran: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("child's pod %s not running: %v\n%s", name, ctx.Err(), out.String())
		case <-time.After(500 * time.Millisecond):
		}
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Labels[LabelInstance] != instance {
			continue
		}
		running = p.Status.Phase == corev1.PodRunning && p.Spec.ActiveDeadlineSeconds != nil && *p.Spec.ActiveDeadlineSeconds < 600+int64(runtime.BootTimeout/time.Second)
	}
	time.Sleep(2 * time.Second) // the exec starts after the deadline is set
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	t.Logf("child killed with -9:\n%s", out.String())
	if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the killed child's pod %s is gone before the sweep (%v): the test proves nothing", name, err)
	}

	k, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig, StateDir: state}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := k.Sweep(ctx); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	t.Logf("sweep in %s", time.Since(start).Round(10*time.Millisecond))
	left := skillboxPodNames(ctx, t, c)
	if want := []string{"sweep-live-owner", "sweep-other-instance"}; !slices.Equal(left, want) {
		t.Errorf("pods after the sweep: %v, want %v (the killed run's %s gone, the others spared)", left, want, name)
	}
}

// TestSweepChild is TestSweepAfterKill's child process: it runs a job of
// ten minutes on the backend until it is killed. Outside that test it does
// nothing.
func TestSweepChild(t *testing.T) {
	id := os.Getenv(envSweepChild)
	if id == "" {
		return
	}
	name, digest, _ := strings.Cut(os.Getenv(envSweepImage), "@")
	img := pythonImage(t)
	if img.Name != name || img.Digest != digest {
		t.Fatalf("image %s@%s, want %s", img.Name, img.Digest, os.Getenv(envSweepImage))
	}
	k, err := New(runtime.Options{Backend: Options{Kubeconfig: os.Getenv(envSweepKube), StateDir: os.Getenv(envSweepState)}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := k.Run(t.Context(), runtime.Job{
		Sandbox:    runtime.SandboxSpec{ID: id, Image: img},
		Invocation: runtime.Invocation{Args: []string{"sleep", "600"}, Limits: runtime.Limits{Timeout: 600 * time.Second}},
	})
	t.Fatalf("the job ended, it should have been killed first: %+v %v", res, err)
}

// createLabelledPods makes a pod holding a shell for each name with its
// labels, deleted when the test ends.
func createLabelledPods(ctx context.Context, t *testing.T, pods typedcorev1.PodInterface, labelled map[string]map[string]string) {
	t.Helper()
	for name, labels := range labelled {
		p := shellPod("x", "sleep 600")
		p.GenerateName, p.Name, p.Labels = "", name, labels
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			zero := int64(0)
			_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
	}
}
