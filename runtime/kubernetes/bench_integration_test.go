//go:build integration

package kubernetes

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// BenchmarkPod measures runs on the test cluster (docs/BENCHMARKS.md,
// "Kubernetes"): a cold pod run (create, schedule, start, exec, delete), a
// warm claim and run of a Ready pod of the pool, the rate of 4 clients
// over a pool of 4, and the memory of the cluster's processes.
//
//	SKILLBOX_TEST_REQUIRE_SANDBOXES=1 go test -tags integration -run '^$' \
//	    -bench BenchmarkPod -benchtime 10x -timeout 60m ./runtime/kubernetes/
func BenchmarkPod(b *testing.B) {
	img := pythonImage(b)
	c := startCluster(b)
	ctx := context.Background()
	c.ensureNamespace(ctx, b)
	k, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig}})
	if err != nil {
		b.Fatal(err)
	}
	c.importImage(ctx, b, img)
	// The pool says why a pod failed to boot.
	log := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn, Output: os.Stderr})
	var seq atomic.Int64
	job := func() runtime.Job {
		return runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("kube-bench-%d-%d", time.Now().UnixNano(), seq.Add(1)), Image: img},
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", "print('hello')"}, Limits: runtime.Limits{Timeout: time.Minute}},
		}
	}
	check := func(b *testing.B, res *runtime.Result, err error) {
		if err != nil {
			b.Fatal(err)
		}
		if res.ExitCode != 0 || string(res.Stdout) != "hello\n" {
			b.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
	}

	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			res, err := k.Run(ctx, job())
			check(b, res, err)
		}
	})

	b.Run("warm", func(b *testing.B) {
		pool := runtime.NewPool(k, runtime.PoolConfig{PerKey: 1, Total: 1, IdleTimeout: time.Hour}, log)
		defer pool.Close(ctx)
		key, _ := runtime.KeyFor(job(), "bench", "sha256:bench")
		pool.Warm(key)
		for b.Loop() {
			b.StopTimer()
			waitPoolIdle(b, pool, 1)
			b.StartTimer()
			res, err := pool.Run(ctx, key, job())
			check(b, res, err)
			if !res.Warm {
				b.Fatal("a cold run with a pod ready")
			}
		}
	})

	b.Run("warm_4_clients", func(b *testing.B) {
		pool := runtime.NewPool(k, runtime.PoolConfig{PerKey: 4, Total: 4, IdleTimeout: time.Hour}, log)
		defer pool.Close(ctx)
		small := func() runtime.Job { j := job(); j.Sandbox.Limits.CPUs = benchCPUs; return j }
		key, _ := runtime.KeyFor(small(), "bench", "sha256:bench")
		pool.Warm(key)
		waitPoolIdle(b, pool, 4)
		b.ResetTimer()
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					res, err := pool.Run(ctx, key, small())
					check(b, res, err)
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
		st := pool.Stats()
		b.ReportMetric(float64(st.Warm)/float64(st.Warm+st.Cold), "warm_fraction")
		// The cluster's memory with the pool full and its pods deleted
		// behind the runs (a parent benchmark's metrics are not printed).
		cp, node := clusterMemory(b)
		b.ReportMetric(cp, "control_plane_MiB")
		b.ReportMetric(node, "node_agents_MiB")
	})
}

// benchCPUs is the CPU limit of the runs of 4 clients, which their pods
// request: 4 pods run jobs while the pool boots 4 more, and 8 such pods
// fit a 2-core node only below a quarter of a core each. The cold and
// warm runs have the default limit (one core).
const benchCPUs = 0.2

// waitPoolIdle waits up to 3 minutes until pool holds n idle pods.
func waitPoolIdle(t testing.TB, pool *runtime.Pool, n int) {
	t.Helper()
	waitfor.Within(3*time.Minute, func() bool { return pool.Stats().Idle >= n })
	if st := pool.Stats(); st.Idle < n {
		t.Fatalf("%d pods ready after 3 minutes, want %d: %+v", st.Idle, n, st)
	}
}

// clusterMemory is the resident memory of the test cluster's control
// plane (etcd, apiserver, controller-manager, scheduler) and of its node
// agents (kubelet, containerd), in MiB, from the pids hack/kube.sh keeps.
func clusterMemory(t testing.TB) (controlPlane, nodeAgents float64) {
	t.Helper()
	dir := os.Getenv("KUBE_DIR")
	if dir == "" {
		dir = "/var/tmp/skillbox-kube"
	}
	rss := func(name string) float64 {
		raw, err := os.ReadFile(filepath.Join(dir, "pids", name))
		if err != nil {
			t.Fatalf("pid of %s: %v", name, err)
		}
		f, err := os.Open(filepath.Join("/proc", strings.TrimSpace(string(raw)), "status"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				if err != nil {
					t.Fatalf("%s VmRSS %q: %v", name, v, err)
				}
				return kb / 1024
			}
		}
		t.Fatalf("%s: no VmRSS", name)
		return 0
	}
	for _, n := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		controlPlane += rss(n)
	}
	for _, n := range []string{"kubelet", "containerd"} {
		nodeAgents += rss(n)
	}
	return controlPlane, nodeAgents
}
