//go:build integration

package kubernetes

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/runtime"
)

// testWarmPool runs the local pool over the kubernetes backend: pods are
// made Ready ahead of their job, a claim takes one without waiting on the
// scheduler, each pod runs one job and is replaced in the background, and
// Close leaves no pod.
func testWarmPool(ctx context.Context, t *testing.T, k *Kubernetes, c *testCluster, img runtime.ImageRef) {
	// The pool says why a pod failed to boot.
	log := hclog.New(&hclog.LoggerOptions{Name: "pool", Level: hclog.Warn, Output: os.Stderr})
	pool := runtime.NewPool(k, runtime.PoolConfig{PerKey: 2, Total: 2, IdleTimeout: 10 * time.Minute}, log)
	closed := false
	defer func() {
		if !closed {
			pool.Close(context.WithoutCancel(ctx))
		}
	}()
	job := runtime.Job{
		Sandbox:    runtime.SandboxSpec{Image: img, Limits: runtime.Limits{CPUs: benchCPUs}},
		Invocation: runtime.Invocation{Args: []string{"python3", "-c", "print(open('/proc/version').read())"}, Limits: runtime.Limits{Timeout: time.Minute}},
	} // 2 idle pods, 1 in use and a refill fit the node
	key, ok := runtime.KeyFor(job, "kube-pool-test", "sha256:test")
	if !ok {
		t.Fatal("job cannot run warm")
	}
	boot := time.Now()
	pool.Warm(key)
	waitPoolIdle(t, pool, 2)
	t.Logf("2 pods ready in %s", time.Since(boot).Round(10*time.Millisecond))

	var claims []time.Duration
	for i := range 4 {
		job.Sandbox.ID = fmt.Sprintf("kube-pool-%d-%d", i, time.Now().UnixNano())
		start := time.Now()
		res, err := pool.Run(ctx, key, job)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if !res.Warm || res.ExitCode != 0 || !strings.Contains(strings.ToLower(string(res.Stdout)), "gvisor") {
			t.Errorf("claim %d: warm %v exit %d stdout %q stderr %q, want a warm run on gVisor's kernel", i, res.Warm, res.ExitCode, res.Stdout, res.Stderr)
		}
		claims = append(claims, took)
		waitPoolIdle(t, pool, 2) // replaced in the background
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i] < claims[j] })
	t.Logf("warm claim+run: %v", claims)
	if st := pool.Stats(); st.Warm != 4 || st.Cold != 0 {
		t.Errorf("pool stats %+v, want 4 warm runs and no cold one", st)
	}

	// A pool pod waits for its job without a deadline; the job gets one.
	pods, err := c.cs.CoreV1().Pods(DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.ActiveDeadlineSeconds != nil {
			t.Errorf("idle pool pod %s has a deadline of %d s before its job", p.Name, *p.Spec.ActiveDeadlineSeconds)
		}
	}

	closed = true
	if err := pool.Close(context.WithoutCancel(ctx)); err != nil {
		t.Errorf("pool close: %v", err)
	}
	noPodsLeft(context.WithoutCancel(ctx), t, c, "the pool")
}
