//go:build integration

package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// agentBackend is the backend with the agent data path on the test
// cluster: the agent's image goes through the test registry, and the
// agents are dialled from the node's network namespace.
func agentBackend(ctx context.Context, t *testing.T) (*Kubernetes, *testCluster, runtime.ImageRef) {
	t.Helper()
	img := pythonImage(t)
	bin := os.Getenv("SKILLBOX_BIN")
	if bin == "" {
		runtimetest.SkipUnlessRequired(t, "SKILLBOX_BIN is not set: the agent's image needs a static skillbox binary (make build)")
	}
	reg := newTestRegistry(t)
	c := startCluster(t)
	c.useRegistry(t, reg)
	c.ensureNamespace(ctx, t)
	c.importImage(ctx, t, img)
	_, nodeNS := testNode(ctx, t, c)
	k, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig, Registry: c.registry + "/skillbox", EgressNetNS: nodeNS, DataPath: DataPathAgent, AgentBinary: bin}})
	if err != nil {
		t.Fatal(err)
	}
	k.artifacts = NewArtifacts(t.TempDir())
	return k, c, img
}

// TestAgentPath runs jobs through the pods' agents: a cold run with a
// skill, inputs and outputs; warm runs from the pool with no exec, attach
// or port-forward request to the API server (its own metrics count
// them); a job that cannot reach its agent; and a pod's identity that
// another pod cannot answer for.
func TestAgentPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	k, c, img := agentBackend(ctx, t)

	skill := writeTree(t, t.TempDir(), map[string]string{"SKILL.md": "---\nname: agent\n---\n", "scripts/s.py": "print('skill')\n", "data/msg.txt": "from the skill\n"})
	t.Run("Cold", func(t *testing.T) {
		script := `import os
print(open("/skill/data/msg.txt").read().strip(), open("/work/in.txt").read(), os.getuid(), os.getcwd())
for p in ("/skill/new", "/skill/data/msg.txt"):
    try:
        open(p, "w")
        print("writable", p)
    except OSError:
        print("read-only", p)
open("/work/outputs/out.txt", "w").write("made")
`
		job := runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("agent-cold-%d", time.Now().UnixNano()), Image: img, SkillDir: skill},
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", script}, Files: []runtime.InputFile{{Name: "in.txt", Data: []byte("input")}}, Limits: runtime.Limits{Timeout: time.Minute}},
		}
		res, err := k.Run(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		want := "from the skill input 65534 /work\nread-only /skill/new\nread-only /skill/data/msg.txt\n"
		if res.ExitCode != 0 || string(res.Stdout) != want {
			t.Fatalf("exit %d stdout %q stderr %q, want %q", res.ExitCode, res.Stdout, res.Stderr, want)
		}
		if !slices.ContainsFunc(res.Outputs, func(o runtime.OutputFile) bool { return o.Path == "outputs/out.txt" && string(o.Data) == "made" }) {
			t.Errorf("outputs %+v, want outputs/out.txt", res.Outputs)
		}
		noPodsLeft(ctx, t, c, job.Sandbox.ID)
	})

	t.Run("Warm", func(t *testing.T) {
		log := hclog.New(&hclog.LoggerOptions{Name: "pool", Level: hclog.Warn, Output: os.Stderr})
		pool := runtime.NewPool(k, runtime.PoolConfig{PerKey: 1, Total: 2, IdleTimeout: 10 * time.Minute}, log)
		defer pool.Close(context.WithoutCancel(ctx))
		job := runtime.Job{
			Sandbox:    runtime.SandboxSpec{Image: img, SkillDir: skill, Limits: runtime.Limits{CPUs: benchCPUs}},
			Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/s.py"}, Limits: runtime.Limits{Timeout: time.Minute}},
		}
		key, ok := runtime.KeyFor(job, "agent", "sha256:agent-test")
		if !ok {
			t.Fatal("job cannot run warm")
		}
		pool.Warm(key)
		var took []time.Duration
		for i := range 4 {
			waitPoolIdle(t, pool, 1)
			before := streamRequests(ctx, t, c.cs)
			job.Sandbox.ID = fmt.Sprintf("agent-warm-%d-%d", i, time.Now().UnixNano())
			start := time.Now()
			res, err := pool.Run(ctx, key, job)
			took = append(took, time.Since(start))
			if err != nil {
				t.Fatal(err)
			}
			if after := streamRequests(ctx, t, c.cs); after != before {
				t.Errorf("warm run %d: the API server had %v exec, attach and port-forward requests during the run", i, after-before)
			}
			if !res.Warm || res.ExitCode != 0 || string(res.Stdout) != "skill\n" {
				t.Errorf("warm run %d: warm %v exit %d stdout %q stderr %q", i, res.Warm, res.ExitCode, res.Stdout, res.Stderr)
			}
		}
		t.Logf("warm claim and run through the agent: %v", took)
	})

	t.Run("JobCannotReachAgent", func(t *testing.T) {
		script := `import socket
ips = ["127.0.0.1", "::1"]
for line in open("/etc/hosts"):
    f = line.split()
    if len(f) >= 2 and not f[0].startswith(("127.", "::1", "fe00", "ff0", "#")):
        ips.append(f[0])
for ip in ips:
    for port in (7443, 22, 80):
        fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect((ip, port))
            print("reached", ip, port)
        except OSError as e:
            print("refused", ip, port, type(e).__name__)
        s.close()
print("pod ip seen:", len(ips) > 2)
`
		job := runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("agent-reach-%d", time.Now().UnixNano()), Image: img},
			Invocation: runtime.Invocation{Args: []string{"python3", "-c", script}, Limits: runtime.Limits{Timeout: time.Minute}},
		}
		res, err := k.Run(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		out := string(res.Stdout)
		if res.ExitCode != 0 || strings.Contains(out, "reached") || !strings.Contains(out, "pod ip seen: True") {
			t.Fatalf("exit %d stdout %q stderr %q: want every address and port refused, the pod's own IP among them", res.ExitCode, out, res.Stderr)
		}
	})

	t.Run("AnotherPodsIdentity", func(t *testing.T) {
		spec := func(id string) runtime.SandboxSpec {
			return runtime.SandboxSpec{ID: id, Image: img, Boot: runtime.BootExec, Limits: runtime.Limits{CPUs: benchCPUs}}
		}
		var pods []*podSandbox
		for _, id := range []string{"agent-id-a", "agent-id-b"} {
			sb, err := k.Create(ctx, spec(fmt.Sprintf("%s-%d", id, time.Now().UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(context.WithoutCancel(ctx))
			if err := sb.Start(ctx); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, sb.(*podSandbox))
		}
		a, b := pods[0], pods[1]
		ipB, err := k.podIP(b.running)
		if err != nil {
			t.Fatal(err)
		}
		// B's agent answers at B's IP with B's certificate: a daemon that
		// means A refuses it.
		cl, err := k.dialAgent(ctx, c.cs, a.agentID, ipB)
		if err == nil {
			cl.Close()
			t.Fatal("a daemon dialling pod A accepted pod B's agent")
		}
		if !strings.Contains(err.Error(), "another pod") {
			t.Errorf("error %v, want it to say another pod answered", err)
		}
	})
}

// streamRequests is how many exec, attach and port-forward requests the
// API server has had, from its own metrics.
func streamRequests(ctx context.Context, t *testing.T, cs *k8s.Clientset) float64 {
	t.Helper()
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("the API server's metrics: %v", err)
	}
	var n float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="pods"`) {
			continue
		}
		if !strings.Contains(line, `subresource="exec"`) && !strings.Contains(line, `subresource="attach"`) && !strings.Contains(line, `subresource="portforward"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			n += v
		}
	}
	return n
}

// BenchmarkAgentPod measures runs through the pods' agents on the test
// cluster (docs/BENCHMARKS.md, "Kubernetes"): a cold pod run, a warm
// claim and run, and the rate of 8 clients over a pool of 8.
//
//	SKILLBOX_BIN=$PWD/bin/skillbox SKILLBOX_TEST_REQUIRE_SANDBOXES=1 go test -tags integration -run '^$' \
//	    -bench BenchmarkAgentPod -benchtime 20x -timeout 60m ./runtime/kubernetes/
func BenchmarkAgentPod(b *testing.B) {
	ctx := context.Background()
	img := pythonImage(b)
	bin := os.Getenv("SKILLBOX_BIN")
	if bin == "" {
		runtimetest.SkipUnlessRequired(b, "SKILLBOX_BIN is not set: the agent's image needs a static skillbox binary (make build)")
	}
	reg := newTestRegistry(b)
	c := startCluster(b)
	c.useRegistry(b, reg)
	c.ensureNamespace(ctx, b)
	c.importImage(ctx, b, img)
	_, nodeNS := testNode(ctx, b, c)
	k, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig, Registry: c.registry + "/skillbox", EgressNetNS: nodeNS, DataPath: DataPathAgent, AgentBinary: bin}})
	if err != nil {
		b.Fatal(err)
	}
	k.artifacts = NewArtifacts(b.TempDir())
	log := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn, Output: os.Stderr})
	var seq atomic.Int64
	job := func() runtime.Job {
		return runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("agent-bench-%d-%d", time.Now().UnixNano(), seq.Add(1)), Image: img, Limits: runtime.Limits{CPUs: benchCPUs}},
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
		var took []time.Duration
		for b.Loop() {
			b.StopTimer()
			waitPoolIdle(b, pool, 1)
			b.StartTimer()
			start := time.Now()
			res, err := pool.Run(ctx, key, job())
			took = append(took, time.Since(start))
			check(b, res, err)
			if !res.Warm {
				b.Fatal("a cold run with a pod ready")
			}
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50_ms")
	})
	b.Run("warm_8_clients", func(b *testing.B) {
		pool := runtime.NewPool(k, runtime.PoolConfig{PerKey: 8, Total: 8, IdleTimeout: time.Hour}, log)
		defer pool.Close(ctx)
		key, _ := runtime.KeyFor(job(), "bench", "sha256:bench")
		pool.Warm(key)
		waitPoolIdle(b, pool, 8)
		b.ResetTimer()
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					res, err := pool.Run(ctx, key, job())
					check(b, res, err)
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
		st := pool.Stats()
		b.ReportMetric(float64(st.Warm)/float64(st.Warm+st.Cold), "warm_fraction")
	})
}
