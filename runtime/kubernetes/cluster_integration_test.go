//go:build integration

package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// testImage is the busybox image hack/kube.sh imports into the node's
// containerd (no registry: pods use imagePullPolicy Never).
const testImage = "skillbox.local/kube/busybox:1"

// testCluster is the started test cluster: a client, its kubeconfig, and
// hack/kube.sh to run subcommands of.
type testCluster struct {
	cs         *k8s.Clientset
	kubeconfig string
	script     string
	env        map[string]string // what hack/kube.sh env printed
}

// kube runs hack/kube.sh with args, stdin from in (nil: none).
func (c *testCluster) kube(ctx context.Context, in io.Reader, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.script, args...)
	cmd.Stdin = in
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// startCluster runs `hack/kube.sh up` (the first time it builds Kubernetes,
// which takes minutes: run with -timeout 60m), registers `down` as cleanup
// and returns the cluster. A cluster that cannot start fails the test with
// the script's reason, or skips it when sandboxes are not required here.
func startCluster(t testing.TB) *testCluster {
	t.Helper()
	if os.Geteuid() != 0 {
		runtimetest.SkipUnlessRequired(t, "the test cluster needs root (namespaces, mounts, containerd)")
	}
	for _, bin := range []string{"containerd", "go", "gcc", "jq", "openssl", "apt-get", "nsenter", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			runtimetest.SkipUnlessRequired(t, "hack/kube.sh needs %s on PATH: %v", bin, err)
		}
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "hack", "kube.sh"))
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{script: script}
	kube := func(ctx context.Context, arg string) (string, error) { return c.kube(ctx, nil, arg) }
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := kube(ctx, "down"); err != nil {
			t.Errorf("hack/kube.sh down: %v\n%s", err, out)
		}
	})
	start := time.Now()
	out, err := kube(t.Context(), "up")
	if err != nil {
		t.Fatalf("hack/kube.sh up: %v (the cluster could not start; its logs are under KUBE_DIR/logs, default /var/tmp/skillbox-kube/logs)\n%s", err, out)
	}
	t.Logf("hack/kube.sh up in %s:\n%s", time.Since(start).Round(time.Second), out)
	env, err := kube(t.Context(), "env")
	if err != nil {
		t.Fatalf("hack/kube.sh env: %v\n%s", err, env)
	}
	c.env = map[string]string{}
	for line := range strings.Lines(env) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			c.env[k] = v
		}
	}
	kubeconfig := c.env["KUBECONFIG"]
	if kubeconfig == "" {
		t.Fatalf("hack/kube.sh env printed no KUBECONFIG=:\n%s", env)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kubeconfig, err)
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for %s: %v", kubeconfig, err)
	}
	c.cs, c.kubeconfig = cs, kubeconfig
	return c
}

// importImage imports img of the image store into the node's containerd
// by digest (hack/kube.sh import).
func (c *testCluster) importImage(ctx context.Context, t testing.TB, img runtime.ImageRef) {
	t.Helper()
	start := time.Now()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(WriteImageArchive(pw, img)) }()
	out, err := c.kube(ctx, pr, "import", "-")
	if err != nil {
		t.Fatalf("hack/kube.sh import - of %s@%s: %v\n%s", img.Name, img.Digest, err, out)
	}
	t.Logf("image %s@%s imported in %s:\n%s", img.Name, img.Digest, time.Since(start).Round(time.Second), out)
}

// TestCluster starts the test cluster once for its subtests.
func TestCluster(t *testing.T) {
	cs := startCluster(t).cs
	t.Run("PodsRunOnGVisor", func(t *testing.T) { testPodsRunOnGVisor(t, cs) })
	t.Run("PodNetwork", func(t *testing.T) { testPodNetwork(t, cs) })
}

// testPodsRunOnGVisor: a Pod of RuntimeClass gvisor, confined as the
// backend's runs will be, reads gVisor's kernel, not the host's.
func testPodsRunOnGVisor(t *testing.T, cs *k8s.Clientset) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	host, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.NodeV1().RuntimeClasses().Get(ctx, "gvisor", metav1.GetOptions{}); err != nil {
		t.Fatalf("RuntimeClass gvisor: %v", err)
	}
	pod := createPod(ctx, t, cs, kernelPod())
	created := time.Now()
	waitPod(ctx, t, cs, pod, corev1.PodSucceeded)
	t.Logf("pod %s: created to Succeeded in %s", pod.Name, time.Since(created).Round(10*time.Millisecond))
	out := podLogs(ctx, t, cs, pod)
	t.Logf("pod kernel:\n%s", out)
	version, _, _ := strings.Cut(out, "\n")
	if strings.TrimSpace(version) == strings.TrimSpace(string(host)) {
		t.Fatalf("the pod reads the host's kernel (%q): it did not run under gVisor", version)
	}
	if !strings.Contains(strings.ToLower(version), "gvisor") || !strings.Contains(out, "gVisor") {
		t.Fatalf("the pod's /proc/version and dmesg do not name gVisor (host: %q):\n%s", strings.TrimSpace(string(host)), out)
	}
}

// testPodNetwork: pods reach each other over the pod network, and nothing
// beyond the node (no address outside, not the host's end of the node link).
func testPodNetwork(t *testing.T, cs *k8s.Clientset) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	server := createPod(ctx, t, cs, shellPod("server", "exec nc -l -p 8080 -e /bin/echo hello"))
	server = waitPod(ctx, t, cs, server, corev1.PodRunning)
	probe := fmt.Sprintf(`echo | nc -w 5 %s 8080; echo "pod=$?"; echo | nc -w 2 1.1.1.1 80; echo "outside=$?"; echo | nc -w 2 %s 22; echo "host=$?"`,
		server.Status.PodIP, strings.TrimSuffix(server.Status.HostIP, ".2")+".1")
	client := createPod(ctx, t, cs, shellPod("client", probe))
	waitPod(ctx, t, cs, client, corev1.PodSucceeded)
	out := podLogs(ctx, t, cs, client)
	t.Logf("client pod:\n%s", out)
	for _, want := range []string{"hello\npod=0\n", "outside=1\n", "host=1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("client pod's output lacks %q: pods should reach pods only", want)
		}
	}
}

func createPod(ctx context.Context, t *testing.T, cs *k8s.Clientset, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pod, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		zero := int64(0)
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return pod
}

// waitPod waits for the pod to reach phase; Failed, or the context's end,
// fails the test with the pod's status and events.
func waitPod(ctx context.Context, t *testing.T, cs *k8s.Clientset, pod *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	start := time.Now()
	for {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s: %v%s", pod.Name, err, describe(cs, pod))
		}
		if p.Status.Phase == phase {
			return p
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed%s", pod.Name, describe(cs, pod))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s: still %s after %s, want %s%s", pod.Name, p.Status.Phase, time.Since(start).Round(time.Second), phase, describe(cs, pod))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func podLogs(ctx context.Context, t *testing.T, cs *k8s.Clientset, pod *corev1.Pod) string {
	t.Helper()
	logs, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of pod %s: %v", pod.Name, err)
	}
	return string(logs)
}

// shellPod runs script with busybox's sh under gVisor, confined as
// kernelPod.
func shellPod(name, script string) *corev1.Pod {
	pod := kernelPod()
	pod.GenerateName = name + "-"
	pod.Spec.Containers[0].Command = []string{"/bin/sh", "-c", script}
	return pod
}

// kernelPod prints /proc/version and the kernel log, under gVisor and the
// confinement the backend's runs will have.
func kernelPod() *corev1.Pod {
	no, yes := false, true
	nobody := int64(65534)
	gvisor := "gvisor"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gvisor-kernel-", Labels: map[string]string{"app.kubernetes.io/managed-by": "skillbox-test"}},
		Spec: corev1.PodSpec{
			RuntimeClassName:             &gvisor,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &nobody,
				RunAsGroup:     &nobody,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "kernel",
				Image:           testImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", "cat /proc/version && dmesg"},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// describe is what a failed wait reports: the pod's status and its events
// (ErrImageNeverPull, FailedCreatePodSandBox, an unknown RuntimeClass, …).
func describe(cs *k8s.Clientset, pod *corev1.Pod) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&b, "\nphase %s", p.Status.Phase)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "\ncondition %s=%s %s %s", c.Type, c.Status, c.Reason, c.Message)
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil {
				fmt.Fprintf(&b, "\ncontainer %s waiting: %s %s", s.Name, w.Reason, w.Message)
			}
			if x := s.State.Terminated; x != nil {
				fmt.Fprintf(&b, "\ncontainer %s terminated: exit %d %s %s", s.Name, x.ExitCode, x.Reason, x.Message)
			}
		}
	}
	events, err := cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err == nil {
		for _, e := range events.Items {
			fmt.Fprintf(&b, "\nevent %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}
