package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/skillbox/skillbox/runtime"
)

// fakeBackend is a backend on a fake API server with its state dir in a
// temp dir.
func fakeBackend(t *testing.T, dir string, objs ...*corev1.Pod) (*Kubernetes, *fake.Clientset) {
	t.Helper()
	k, err := New(runtime.Options{Backend: Options{StateDir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	for _, p := range objs {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	k.client, k.cfg = cs, &rest.Config{Host: "fake"}
	return k, cs
}

func labelledPod(name, namespace string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}}
}

// Sweep deletes the pods of this instance whose owning process is gone,
// and nothing else: not this process's, not another live process's, not
// another instance's, not pods skillbox did not make.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	instance, err := loadInstance(dir)
	if err != nil {
		t.Fatal(err)
	}
	self, err := processOwner(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	parent, err := processOwner(os.Getppid())
	if err != nil {
		t.Fatal(err)
	}
	pid, _, _ := strings.Cut(self, "-")
	ours := func(owner string) map[string]string {
		l := map[string]string{LabelManagedBy: ManagedBy, LabelInstance: instance}
		if owner != "" {
			l[LabelOwner] = owner
		}
		return l
	}
	other := map[string]string{LabelManagedBy: ManagedBy, LabelInstance: strings.Repeat("0", 32), LabelOwner: "1-1"}
	ns := DefaultNamespace
	pods := []*corev1.Pod{
		labelledPod("mine", ns, ours(self)),
		labelledPod("live-other-process", ns, ours(parent)),
		labelledPod("dead-start-time", ns, ours(pid+"-1")), // this pid, an earlier process
		labelledPod("dead-pid", ns, ours(fmt.Sprintf("%d-5", 1<<30))),
		labelledPod("no-owner", ns, ours("")),
		labelledPod("malformed-owner", ns, ours("x")),
		labelledPod("other-instance", ns, other),
		labelledPod("not-skillbox", ns, map[string]string{LabelInstance: instance, LabelOwner: "1-1"}),
		labelledPod("other-namespace", "elsewhere", ours(pid+"-1")),
	}
	k, cs := fakeBackend(t, dir, pods...)
	if err := k.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, n := range []string{ns, "elsewhere"} {
		list, err := cs.CoreV1().Pods(n).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			left = append(left, p.Name)
		}
	}
	slices.Sort(left)
	want := []string{"live-other-process", "mine", "not-skillbox", "other-instance", "other-namespace"}
	if !slices.Equal(left, want) {
		t.Errorf("pods left %v, want %v", left, want)
	}
}

// ownPod labels a pod with the instance id, the same across backends on
// one state dir and different on another, and with this process.
func TestOwnPod(t *testing.T) {
	dir := t.TempDir()
	k1, _ := fakeBackend(t, dir)
	k2, _ := fakeBackend(t, dir)
	k3, _ := fakeBackend(t, t.TempDir())
	label := func(k *Kubernetes) map[string]string {
		p := labelledPod("p", DefaultNamespace, map[string]string{LabelManagedBy: ManagedBy})
		if err := k.ownPod(p); err != nil {
			t.Fatal(err)
		}
		return p.Labels
	}
	l1, l2, l3 := label(k1), label(k2), label(k3)
	if l1[LabelInstance] == "" || l1[LabelInstance] != l2[LabelInstance] || l1[LabelInstance] == l3[LabelInstance] {
		t.Errorf("instances %q %q %q: want one per state dir", l1[LabelInstance], l2[LabelInstance], l3[LabelInstance])
	}
	if !ownerAlive(l1[LabelOwner]) || l1[LabelManagedBy] != ManagedBy {
		t.Errorf("labels %v", l1)
	}
	b, err := os.ReadFile(filepath.Join(dir, instanceFile))
	if err != nil || strings.TrimSpace(string(b)) != l1[LabelInstance] {
		t.Errorf("instance file %q %v", b, err)
	}
}

// A state dir that cannot be made refuses the pod (it could not be swept),
// naming the dir and the setting.
func TestOwnPodStateDirUnusable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	k, _ := fakeBackend(t, filepath.Join(file, "state"))
	err := k.ownPod(labelledPod("p", DefaultNamespace, nil))
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "state_dir") {
		t.Fatalf("ownPod with an unusable state dir: %v", err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, instanceFile), []byte("nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadInstance(bad); err == nil || !strings.Contains(err.Error(), "not 32 lowercase hex") {
		t.Fatalf("malformed instance file: %v", err)
	}
}

func TestStatStartTime(t *testing.T) {
	for _, tc := range []struct {
		name, stat, want string
		err              bool
	}{
		{name: "plain", stat: "42 (sleep) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 12345 1000 100", want: "12345"},
		{name: "name with spaces and parens", stat: "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 777 1000 100", want: "777"},
		{name: "short", stat: "42 (x) S 1", err: true},
		{name: "no name", stat: "42 x S", err: true},
		{name: "not a number", stat: "42 (x) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 abc 1 1", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := statStartTime(tc.stat)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("statStartTime: %q %v, want %q (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

// FuzzOwnerLabel: an owner label is read from the cluster, where anyone
// who may label pods in the namespace can write it; reading it never
// panics, and one that names no live process is dead.
func FuzzOwnerLabel(f *testing.F) {
	for _, s := range []string{"", "1-1", "-", "x-y", "0-0", "-1-5", "4194304-1", "99999999999999999999-1", "1-", "(x) S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, owner string) {
		if ownerAlive(owner) {
			pid, _, _ := strings.Cut(owner, "-")
			if now, err := processOwner(atoiOrZero(pid)); err != nil || now != owner {
				t.Errorf("owner %q alive, but process %s is %q (%v)", owner, pid, now, err)
			}
		}
		_, _ = statStartTime(owner)
	})
}

func atoiOrZero(s string) int {
	var n int
	_, _ = fmt.Sscan(s, &n)
	return n
}
