//go:build integration

package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/runtime"
	_ "github.com/skillbox/skillbox/runtime/ocicli" // the local baseline: runsc
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// agentBackend is the backend with the agent data path on the test
// cluster, with no registry: the interpreter image and its agent image
// (the same digest the backend builds) are on every node (up imports
// them; importAgentImage when the cluster is older than SKILLBOX_BIN),
// and the agents are dialled from node 1's network namespace.
func agentBackend(ctx context.Context, t testing.TB) (*Kubernetes, *testCluster, runtime.ImageRef) {
	t.Helper()
	img := pythonImage(t)
	bin := skillboxBin(t) // the agent's binary, static (make build)
	c := startCluster(t)
	c.ensureNamespace(ctx, t)
	c.importAgentImage(ctx, t, img, bin)
	_, nodeNS := testNode(ctx, t, c)
	log := hclog.New(&hclog.LoggerOptions{Name: "kubernetes", Level: hclog.LevelFromString(os.Getenv("SKILLBOX_TEST_LOG")), Output: os.Stderr})
	k, err := New(runtime.Options{Logger: log, Backend: Options{Kubeconfig: c.kubeconfig, EgressNetNS: nodeNS, DataPath: DataPathAgent, AgentBinary: bin}})
	if err != nil {
		t.Fatal(err)
	}
	k.artifacts = NewArtifacts(t.TempDir())
	return k, c, img
}

// importAgentImage imports img and its agent image with bin into every
// node, unless up did (it imports both).
func (c *testCluster) importAgentImage(ctx context.Context, t testing.TB, img runtime.ImageRef, bin string) {
	t.Helper()
	agents, err := AgentImages(t.TempDir(), bin, img)
	if err != nil {
		t.Fatal(err)
	}
	c.importImage(ctx, t, img, agents[0])
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
		// One pool of pods per image serves every skill: each claim
		// puts its skill's files into the pod, so a skill never run
		// before, and one whose files changed, run their own bytes on
		// pods that were warm before.
		log := hclog.New(&hclog.LoggerOptions{Name: "pool", Level: hclog.Warn, Output: os.Stderr})
		pool := runtime.NewPool(k, runtime.PoolConfig{PerKey: 1, Total: 2, IdleTimeout: 10 * time.Minute}, log)
		defer pool.Close(context.WithoutCancel(ctx))
		other := writeTree(t, t.TempDir(), map[string]string{"SKILL.md": "---\nname: other\n---\n", "scripts/s.py": "print('other')\n"})
		changed := writeTree(t, t.TempDir(), map[string]string{"SKILL.md": "---\nname: agent\n---\n", "scripts/s.py": "print('changed')\n"})
		runs := []struct {
			skill, dir, digest, want string
		}{
			{"agent", skill, "sha256:agent-1", "skill\n"},
			{"other", other, "sha256:other-1", "other\n"},
			{"agent", skill, "sha256:agent-1", "skill\n"},
			{"agent", changed, "sha256:agent-2", "changed\n"},
		}
		var took []time.Duration
		for i, r := range runs {
			job := runtime.Job{
				Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("agent-warm-%d-%d", i, time.Now().UnixNano()), Image: img, SkillDir: r.dir, Limits: runtime.Limits{CPUs: benchCPUs}},
				Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/s.py"}, Limits: runtime.Limits{Timeout: time.Minute}},
			}
			key, ok := runtime.KeyFor(job, r.skill, r.digest)
			if !ok {
				t.Fatal("job cannot run warm")
			}
			pool.Warm(key)
			waitPoolIdle(t, pool, 1)
			if st := pool.Stats(); st.Keys != 1 {
				t.Errorf("run %d: the pool keeps %d keys, want one for every skill of the image: %+v", i, st.Keys, st)
			}
			before := streamRequests(ctx, t, c.cs)
			start := time.Now()
			res, err := pool.Run(ctx, key, job)
			took = append(took, time.Since(start))
			if err != nil {
				t.Fatal(err)
			}
			if after := streamRequests(ctx, t, c.cs); after != before {
				t.Errorf("warm run %d: the API server had %v exec, attach and port-forward requests during the run", i, after-before)
			}
			if !res.Warm || res.ExitCode != 0 || string(res.Stdout) != r.want {
				t.Errorf("warm run %d of skill %s: warm %v exit %d stdout %q stderr %q, want %q", i, r.skill, res.Warm, res.ExitCode, res.Stdout, res.Stderr, r.want)
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

// BenchmarkAgentPod measures runs of a skill's script through the pods'
// agents on the test cluster, beside the same runs on this machine's runsc
// in the same run (docs/BENCHMARKS.md, "Kubernetes"): a cold pod run, a
// warm claim and run (p50), and the rate of 8 clients over a pool of 8
// (pods of one core that request a quarter of it, cpu_request = "25%").
//
//	make build && SKILLBOX_BIN=$PWD/bin/skillbox SKILLBOX_TEST_REQUIRE_SANDBOXES=1 go test -tags integration -run '^$' \
//	    -bench BenchmarkAgentPod -benchtime 20x -timeout 60m ./runtime/kubernetes/
func BenchmarkAgentPod(b *testing.B) {
	ctx := context.Background()
	k, c, img := agentBackend(ctx, b)
	_, nodeNS := testNode(ctx, b, c)
	shared, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig, EgressNetNS: nodeNS, DataPath: DataPathAgent, AgentBinary: skillboxBin(b), CPURequestPercent: 25}})
	if err != nil {
		b.Fatal(err)
	}
	shared.artifacts = k.artifacts
	local, root := localRunsc(ctx, b)
	log := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn, Output: os.Stderr})
	var seq atomic.Int64
	// A skill's script, as `skillbox bench` runs one: in a python worker
	// of a warm sandbox, its skill's files put at claim.
	skill := writeTree(b, b.TempDir(), map[string]string{"SKILL.md": "---\nname: bench\n---\n", "scripts/hello.py": "print('hello')\n"})
	job := func(rootfs string) runtime.Job {
		return runtime.Job{
			Sandbox:    runtime.SandboxSpec{ID: fmt.Sprintf("agent-bench-%d-%d", time.Now().UnixNano(), seq.Add(1)), Image: img, RootFS: rootfs, SkillDir: skill},
			Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/hello.py"}, Limits: runtime.Limits{Timeout: time.Minute}},
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
	// warm claims and runs one at a time, the pool refilled between.
	warm := func(b *testing.B, lc runtime.Lifecycle, rootfs string) {
		pool := runtime.NewPool(lc, runtime.PoolConfig{PerKey: 1, Total: 1, IdleTimeout: time.Hour}, log)
		defer pool.Close(ctx)
		key, _ := runtime.KeyFor(job(rootfs), "bench", "sha256:bench")
		pool.Warm(key)
		var took []time.Duration
		for b.Loop() {
			b.StopTimer()
			waitPoolIdle(b, pool, 1)
			b.StartTimer()
			start := time.Now()
			res, err := pool.Run(ctx, key, job(rootfs))
			took = append(took, time.Since(start))
			check(b, res, err)
			if !res.Warm {
				b.Fatal("a cold run with a sandbox ready")
			}
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50_ms")
	}
	// clients runs b.N runs from n clients over a pool of n.
	clients := func(b *testing.B, lc runtime.Lifecycle, rootfs string, n int) {
		pool := runtime.NewPool(lc, runtime.PoolConfig{PerKey: n, Total: n, IdleTimeout: time.Hour}, log)
		defer pool.Close(ctx)
		key, _ := runtime.KeyFor(job(rootfs), "bench", "sha256:bench")
		pool.Warm(key)
		waitPoolIdle(b, pool, n)
		b.ResetTimer()
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					res, err := pool.Run(ctx, key, job(rootfs))
					check(b, res, err)
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
		st := pool.Stats()
		b.ReportMetric(float64(st.Warm)/float64(st.Warm+st.Cold), "warm_fraction")
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			res, err := k.Run(ctx, job(""))
			check(b, res, err)
		}
	})
	b.Run("warm", func(b *testing.B) { warm(b, k, "") })
	b.Run("local_warm", func(b *testing.B) { warm(b, local, root) })
	b.Run("warm_8_clients", func(b *testing.B) { clients(b, shared, "", 8) })
	b.Run("local_warm_8_clients", func(b *testing.B) { clients(b, local, root, 8) })
}

// localRunsc is this machine's runsc backend, with dirs of its own, and
// the python image's rootfs it runs.
func localRunsc(ctx context.Context, b *testing.B) (runtime.Lifecycle, string) {
	b.Helper()
	store, err := images.OpenStore(imagesDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	img, err := store.Get("python")
	if err != nil {
		b.Fatal(err)
	}
	root, err := store.RootFS(ctx, img)
	if err != nil {
		b.Fatal(err)
	}
	// A dir of its own that outlives the benchmark, as the runtime
	// package's tests keep theirs: the backend keeps mounts in it.
	tmp := "/var/tmp/skillbox-test-kube-local"
	rt, err := runtime.New("runsc", runtime.Options{
		Settings: runtime.Settings{"binary": runtime.PinnedRunscPath(), "state_dir": filepath.Join(tmp, "state")},
		RunDir:   filepath.Join(tmp, "runs"),
	})
	if err != nil {
		b.Fatal(err)
	}
	lc, ok := rt.(runtime.Lifecycle)
	if !ok {
		b.Fatalf("%T has no lifecycle", rt)
	}
	b.Cleanup(func() { lc.Close(context.Background()) })
	return lc, root
}

// TestAgentNewcomerRun runs a skill never run before as a newcomer does
// on the test cluster: `skillbox run --config` with the config up wrote
// (hack/kube.sh env: KUBE_SKILLBOX_CONFIG), no registry and nothing done
// by hand after up; then the skill changes and its new bytes run.
func TestAgentNewcomerRun(t *testing.T) {
	bin := skillboxBin(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cfg := c.env["KUBE_SKILLBOX_CONFIG"]
	if cfg == "" {
		t.Fatalf("hack/kube.sh env names no KUBE_SKILLBOX_CONFIG: up wrote no skillbox config (env: %v)", c.env)
	}
	if shared.started == nil {
		// Not this run's up: its agent images may be another binary's.
		c.importAgentImage(ctx, t, pythonImage(t), bin)
	}
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "skillbox.hcl")
	// The image store of this run.
	extra := fmt.Sprintf("images {\n  dir = %q\n}\n", imagesDir())
	if err := os.WriteFile(conf, append(raw, extra...), 0o644); err != nil {
		t.Fatal(err)
	}
	token := runtimetest.RandomHex(8)
	skill := writeTree(t, filepath.Join(dir, "greeter"), map[string]string{
		"SKILL.md":         "---\nname: greeter\ndescription: Greets, for the newcomer's test.\n---\n# greeter\n\nRun scripts/hello.py.\n",
		"scripts/hello.py": "import sys\nprint(open('/skill/data/word.txt').read().strip(), sys.argv[1])\n",
		"data/word.txt":    "hello-" + token + "\n",
	})
	run := func(want string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, "run", "--config", conf, skill, "scripts/hello.py", "--", "there")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("skillbox run --config %s: %v\n%s\nwant %q in its output", cfg, err, out, want)
		}
	}
	run("hello-" + token + " there")
	if err := os.WriteFile(filepath.Join(skill, "data", "word.txt"), []byte("changed-"+token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("changed-" + token + " there")
}
