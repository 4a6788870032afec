//go:build integration

package kubernetes

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestClaimRaceOnCluster races two replicas, each with its own client and
// its own watch, for one running pool pod of the real API server, a
// thousand times: each round exactly one claims it, and the pod names
// that one.
func TestClaimRaceOnCluster(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c.ensureNamespace(ctx, t)

	pod := shellPod("claim-race", "sleep 600")
	pod.Namespace = DefaultNamespace
	pod.Labels = map[string]string{LabelManagedBy: ManagedBy, LabelPool: "claim-race"}
	pod.Spec.Containers[0].Name = containerName
	made, err := c.cs.CoreV1().Pods(DefaultNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.cs.CoreV1().Pods(DefaultNamespace).Delete(context.WithoutCancel(ctx), made.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	waitPod(ctx, t, c.cs, made, corev1.PodRunning)

	replicas := map[string]*FreePods{}
	for _, holder := range []string{"replica-a", "replica-b"} {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cfg.QPS, cfg.Burst = 1000, 1000 // the race, not the client's rate limit
		cs, err := k8s.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		f := NewFreePods(cs, DefaultNamespace, holder)
		if err := f.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer f.Stop()
		replicas[holder] = f
	}
	release := []byte(`{"metadata":{"labels":{"` + LabelHolder + `":null}}}`)
	const rounds = 1000
	start := time.Now()
	wins := map[string]int{}
	for round := range rounds {
		// Both watches see the pod free before they race.
		for _, f := range replicas {
			for len(f.Free("claim-race")) != 1 {
				if ctx.Err() != nil {
					t.Fatalf("round %d: the pod is not seen free: %v", round, ctx.Err())
				}
				time.Sleep(time.Millisecond)
			}
		}
		var mu sync.Mutex
		var winners []string
		var wg sync.WaitGroup
		for holder, f := range replicas {
			wg.Go(func() {
				got, err := f.Claim(ctx, "claim-race")
				switch {
				case err != nil && !errors.Is(err, ErrClaimLost):
					t.Errorf("round %d: %s: %v", round, holder, err)
				case got != nil:
					mu.Lock()
					winners = append(winners, holder)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: winners %v, want exactly one", round, winners)
		}
		now, err := c.cs.CoreV1().Pods(DefaultNamespace).Get(ctx, made.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if now.Labels[LabelHolder] != winners[0] {
			t.Fatalf("round %d: %s won, the pod names %q", round, winners[0], now.Labels[LabelHolder])
		}
		wins[winners[0]]++
		if _, err := c.cs.CoreV1().Pods(DefaultNamespace).Patch(ctx, made.Name, types.MergePatchType, release, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds in %s, wins %v", rounds, time.Since(start).Round(time.Millisecond), wins)
}
