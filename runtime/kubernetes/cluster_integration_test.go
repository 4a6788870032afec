//go:build integration

package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// testImage is the busybox image hack/kube.sh imports into the node's
// containerd (no registry: pods use imagePullPolicy Never).
const testImage = "skillbox.local/kube/busybox:1"

// testCluster is the started test cluster: a client, its kubeconfig, and
// hack/kube.sh to run subcommands of. One is shared by all the tests of a
// `go test` run (startCluster): each test leaves no pod of its own behind,
// and none depends on what another did before it.
type testCluster struct {
	cs         *k8s.Clientset
	kubeconfig string
	script     string
	env        map[string]string // what hack/kube.sh env printed
	nodes      []clusterNode     // the cluster's nodes, node 1 (the control plane's) first

	// registry is HOST:PORT of the plain-HTTP registry the node's
	// containerd may pull from (KUBE_REGISTRY of `up`): the cluster
	// listens on it on the host's loopback, for pushes, and on the node's,
	// for pulls; useRegistry says what serves it.
	registry  string
	regMux    registryMux
	listeners []net.Listener

	importMu sync.Mutex
	imported map[string]bool // digests imported into the node
}

// clusterNode is one node of the test cluster, as hack/kube.sh env names it.
type clusterNode struct {
	name  string
	ip    string
	netns string // its network namespace, /proc/PID/ns/net
}

// The cluster of this `go test` run, started by the first test that needs
// it and brought down by TestMain.
var shared struct {
	once    sync.Once
	c       *testCluster // the cluster the tests use
	err     error
	started *testCluster // the cluster this process started, if any
}

// TestMain brings the shared cluster down after the tests, if this process
// started it. A child process the tests re-execute (TestSweepChild, crash
// helpers) starts none and brings none down: startCluster is the only
// start, and in a child it uses the parent's cluster (envClusterOwner).
func TestMain(m *testing.M) {
	code := m.Run()
	if err := stopSharedCluster(); err != nil {
		fmt.Fprintf(os.Stderr, "the test cluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// kube runs hack/kube.sh with args, stdin from in (nil: none).
func (c *testCluster) kube(ctx context.Context, in io.Reader, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.script, args...)
	cmd.Env = append(os.Environ(), "KUBE_REGISTRY="+c.registry)
	if _, ok := os.LookupEnv("KUBE_IMAGES"); !ok {
		// The interpreter image the tests run; others are imported
		// by the tests that need them (importImage).
		cmd.Env = append(cmd.Env, "KUBE_IMAGES=python")
	}
	cmd.Stdin = in
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// startCluster returns the shared test cluster, started by the first call
// of the run (`hack/kube.sh up`; the first time on a machine it builds
// Kubernetes, which takes minutes: run with -timeout 60m). A cluster that
// cannot start fails every test that needs it with the script's reason, or
// skips them when sandboxes are not required here. When the test ends, no
// pod of skillbox's or of the tests may be left: one that is fails the test
// and is deleted, so that the next test starts clean.
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
	shared.once.Do(func() { shared.c, shared.err = bootCluster(t) })
	if shared.err != nil {
		t.Fatalf("%v", shared.err)
	}
	c := shared.c
	t.Cleanup(func() { c.noPodsOfTests(t) })
	return c
}

// The environment of the children a test re-executes (os.Args[0]): the
// pid of the process that started the cluster, and the cluster's registry
// address. A child with them uses that cluster as it is.
const (
	envClusterOwner    = "SKILLBOX_TEST_KUBE_OWNER"
	envClusterRegistry = "SKILLBOX_TEST_KUBE_REGISTRY"
)

// bootCluster starts the cluster with its registry listener on the host's
// loopback (the node's is opened once the cluster's network namespace
// exists). A cluster left up by an earlier run that did not end (a test
// binary killed, a -timeout) is brought down first: its registry is not
// this run's.
func bootCluster(t testing.TB) (*testCluster, error) {
	script, err := filepath.Abs(filepath.Join("..", "..", "hack", "kube.sh"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	c := &testCluster{script: script, imported: map[string]bool{}}
	if owner := os.Getenv(envClusterOwner); owner != "" && owner != strconv.Itoa(os.Getpid()) {
		// A child of the process that started the cluster: its
		// registry listeners are the parent's.
		c.registry = os.Getenv(envClusterRegistry)
		return c, c.connect(ctx)
	}
	hostL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the registry's listener: %w", err)
	}
	c.registry, c.listeners = hostL.Addr().String(), []net.Listener{hostL}
	shared.started = c // TestMain brings down what up started, even if a later step fails
	c.serve(hostL)
	if out, err := c.kube(ctx, nil, "down"); err != nil {
		return nil, fmt.Errorf("hack/kube.sh down (before up): %w\n%s", err, out)
	}
	start := time.Now()
	out, err := c.kube(ctx, nil, "up")
	if err != nil {
		return nil, fmt.Errorf("hack/kube.sh up: %w (the cluster could not start; its logs are under KUBE_DIR/logs, default /var/tmp/skillbox-kube/logs)\n%s", err, out)
	}
	t.Logf("hack/kube.sh up in %s (shared by the tests of this run):\n%s", time.Since(start).Round(time.Second), out)
	// The images up imported into every node, by digest reference.
	for _, m := range importedRef.FindAllStringSubmatch(out, -1) {
		c.imported[m[1]] = true
	}
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	// Each node's containerd pulls from the registry on its own loopback.
	for _, n := range c.nodes {
		nodeL, err := listenNetNS(n.netns, c.registry)
		if err != nil {
			return nil, fmt.Errorf("listen on %s in node %s's network namespace: %w", c.registry, n.name, err)
		}
		c.listeners = append(c.listeners, nodeL)
		c.serve(nodeL)
	}
	os.Setenv(envClusterOwner, strconv.Itoa(os.Getpid()))
	os.Setenv(envClusterRegistry, c.registry)
	return c, nil
}

// importedRef is a digest reference of an interpreter image in the output
// of up.
var importedRef = regexp.MustCompile(ImagePrefix + `[a-z0-9._/-]+@(sha256:[0-9a-f]{64})`)

// connect reads the cluster's kubeconfig and nodes (hack/kube.sh env) and
// makes a client of it.
func (c *testCluster) connect(ctx context.Context) error {
	env, err := c.kube(ctx, nil, "env")
	if err != nil {
		return fmt.Errorf("hack/kube.sh env: %w\n%s", err, env)
	}
	c.env = map[string]string{}
	for line := range strings.Lines(env) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			c.env[k] = v
		}
	}
	c.nodes = nil
	for i := 1; c.env[fmt.Sprintf("KUBE_NODE_%d", i)] != ""; i++ {
		k := fmt.Sprintf("KUBE_NODE_%d", i)
		n := clusterNode{name: c.env[k], ip: c.env[k+"_IP"], netns: c.env[k+"_NETNS"]}
		if n.ip == "" || n.netns == "" {
			return fmt.Errorf("hack/kube.sh env: node %s has no %s_IP or %s_NETNS:\n%s", n.name, k, k, env)
		}
		c.nodes = append(c.nodes, n)
	}
	if len(c.nodes) == 0 {
		return fmt.Errorf("hack/kube.sh env printed no nodes (KUBE_NODE_1=...):\n%s", env)
	}
	kubeconfig := c.env["KUBECONFIG"]
	if kubeconfig == "" {
		return fmt.Errorf("hack/kube.sh env printed no KUBECONFIG=:\n%s", env)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for %s: %w", kubeconfig, err)
	}
	c.cs, c.kubeconfig = cs, kubeconfig
	return nil
}

// stopSharedCluster closes the registry's listeners and runs `hack/kube.sh
// down`, if this process started the cluster.
func stopSharedCluster() error {
	c := shared.started
	if c == nil {
		return nil
	}
	for _, l := range c.listeners {
		l.Close()
	}
	// Removing the node's image store takes minutes on a busy disk.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	if out, err := c.kube(ctx, nil, "down"); err != nil {
		return fmt.Errorf("hack/kube.sh down: %w\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "the test cluster: hack/kube.sh down in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// registryMux serves the cluster's registry address with the handler of
// the test using it now.
type registryMux struct {
	mu sync.Mutex
	h  http.Handler
}

func (m *registryMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	h := m.h
	m.mu.Unlock()
	if h == nil {
		http.Error(w, "no test serves the test cluster's registry now (testCluster.useRegistry)", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

func (c *testCluster) serve(l net.Listener) {
	srv := &http.Server{Handler: &c.regMux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
}

// useRegistry serves h at c.registry, for the host's pushes and the node's
// pulls, until the test ends.
func (c *testCluster) useRegistry(t testing.TB, h http.Handler) {
	c.regMux.mu.Lock()
	defer c.regMux.mu.Unlock()
	if c.regMux.h != nil {
		t.Fatal("the test cluster's registry is in use by another test")
	}
	c.regMux.h = h
	t.Cleanup(func() {
		c.regMux.mu.Lock()
		c.regMux.h = nil
		c.regMux.mu.Unlock()
	})
}

// testPodsSelector selects the pods of skillbox's runs and those the tests
// make themselves.
const testPodsSelector = LabelManagedBy + " in (" + ManagedBy + "," + testManagedBy + ")"

// testManagedBy labels the pods the tests make without the backend.
const testManagedBy = "skillbox-test"

// noPodsOfTests fails t if pods of runs or of tests are still there a
// minute after it (pods being deleted take a moment), and deletes them:
// the next test must not see them.
func (c *testCluster) noPodsOfTests(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var pods *corev1.PodList
	var err error
	if waitfor.Within(time.Minute, func() bool {
		pods, err = c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: testPodsSelector})
		return err != nil || len(pods.Items) == 0
	}) && err == nil {
		return
	}
	if err != nil {
		t.Errorf("pods left by the test: %v", err)
		return
	}
	zero := int64(0)
	for _, p := range pods.Items {
		t.Errorf("the test left pod %s/%s (%s, labels %v); deleted now", p.Namespace, p.Name, p.Status.Phase, p.Labels)
		_ = c.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
}

// ensureNamespace makes the backend's default namespace, or keeps it;
// one being deleted (TestManifests removes it) is waited for first.
func (c *testCluster) ensureNamespace(ctx context.Context, t testing.TB) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DefaultNamespace}}
	for {
		_, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsAlreadyExists(err) {
			t.Fatalf("namespace %s: %v", DefaultNamespace, err)
		}
		got, err := c.cs.CoreV1().Namespaces().Get(ctx, DefaultNamespace, metav1.GetOptions{})
		if err == nil && got.Status.Phase != corev1.NamespaceTerminating {
			return
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("namespace %s: %v", DefaultNamespace, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s is still being deleted: %v", DefaultNamespace, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// importImage imports imgs (of the image store, or built beside it) into
// every node's containerd by digest (hack/kube.sh import), each digest
// once per run.
func (c *testCluster) importImage(ctx context.Context, t testing.TB, imgs ...runtime.ImageRef) {
	t.Helper()
	c.importMu.Lock()
	defer c.importMu.Unlock()
	var want []runtime.ImageRef
	for _, img := range imgs {
		if !c.imported[img.Digest] {
			want = append(want, img)
		}
	}
	if len(want) == 0 {
		return
	}
	start := time.Now()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(WriteImageArchive(pw, want...)) }()
	out, err := c.kube(ctx, pr, "import", "-")
	if err != nil {
		t.Fatalf("hack/kube.sh import - of %v: %v\n%s", want, err, out)
	}
	for _, img := range want {
		c.imported[img.Digest] = true
	}
	t.Logf("images %v imported in %s:\n%s", want, time.Since(start).Round(time.Second), out)
}

// TestCluster starts the test cluster once for its subtests.
func TestCluster(t *testing.T) {
	c := startCluster(t)
	t.Run("NodesReady", func(t *testing.T) { testNodesReady(t, c) })
	t.Run("PodsRunOnGVisor", func(t *testing.T) {
		for _, n := range c.nodes {
			t.Run(n.name, func(t *testing.T) { testPodsRunOnGVisor(t, c.cs, n.name) })
		}
	})
	t.Run("PodNetwork", func(t *testing.T) { testPodNetwork(t, c) })
}

// testNodesReady: the cluster has the nodes hack/kube.sh was asked for
// (KUBE_NODES, default 2), distinct, each Ready at the address env names.
func testNodesReady(t *testing.T, c *testCluster) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	want := 2
	if v := os.Getenv("KUBE_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("KUBE_NODES=%q: %v", v, err)
		}
		want = n
	}
	if len(c.nodes) != want {
		t.Fatalf("hack/kube.sh env names %d nodes (%+v), want %d (KUBE_NODES)", len(c.nodes), c.nodes, want)
	}
	list, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != want {
		t.Errorf("the API server has %d nodes, want %d", len(list.Items), want)
	}
	byName := map[string]corev1.Node{}
	for _, n := range list.Items {
		byName[n.Name] = n
	}
	seen := map[string]bool{}
	for _, n := range c.nodes {
		if seen[n.name] || seen[n.ip] {
			t.Errorf("node %s (%s): name or address not distinct", n.name, n.ip)
		}
		seen[n.name], seen[n.ip] = true, true
		node, ok := byName[n.name]
		if !ok {
			t.Errorf("node %s is not registered", n.name)
			continue
		}
		ready, ip := false, ""
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		if !ready || ip != n.ip {
			t.Errorf("node %s: Ready %v, InternalIP %q; want Ready at %s", n.name, ready, ip, n.ip)
		}
	}
}

// testPodsRunOnGVisor: a Pod of RuntimeClass gvisor on node, confined as
// the backend's runs will be, reads gVisor's kernel, not the host's.
func testPodsRunOnGVisor(t *testing.T, cs *k8s.Clientset, node string) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	host, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.NodeV1().RuntimeClasses().Get(ctx, "gvisor", metav1.GetOptions{}); err != nil {
		t.Fatalf("RuntimeClass gvisor: %v", err)
	}
	pod := kernelPod()
	pod.Spec.NodeName = node
	pod = createPod(ctx, t, cs, pod)
	created := time.Now()
	pod = waitPod(ctx, t, cs, pod, corev1.PodSucceeded)
	t.Logf("pod %s on %s: created to Succeeded in %s", pod.Name, pod.Spec.NodeName, time.Since(created).Round(10*time.Millisecond))
	if pod.Spec.NodeName != node {
		t.Errorf("pod %s ran on %s, want %s", pod.Name, pod.Spec.NodeName, node)
	}
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

// testPodNetwork: pods reach each other over the pod network, on one node
// and across nodes (a server on the last node, a client on every node),
// and nothing beyond the nodes (no address outside, not the host's end of
// node 1's link). The daemon side (this test, dialling from node 1's
// network namespace, KUBE_NETNS) reaches the server by its pod IP.
func testPodNetwork(t *testing.T, c *testCluster) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	last := c.nodes[len(c.nodes)-1]
	srv := shellPod("server", "while true; do nc -l -p 8080 -e /bin/echo hello; done")
	srv.Spec.NodeName = last.name
	server := createPod(ctx, t, c.cs, srv)
	server = waitPod(ctx, t, c.cs, server, corev1.PodRunning)
	hostEnd := strings.TrimSuffix(c.nodes[0].ip, ".2") + ".1"
	probe := fmt.Sprintf(`echo | nc -w 5 %s 8080; echo "pod=$?"; echo | nc -w 2 1.1.1.1 80; echo "outside=$?"; echo | nc -w 2 %s 22; echo "host=$?"`,
		server.Status.PodIP, hostEnd)
	for _, n := range c.nodes {
		t.Run("from "+n.name, func(t *testing.T) {
			cl := shellPod("client", probe)
			cl.Spec.NodeName = n.name
			client := createPod(ctx, t, c.cs, cl)
			client = waitPod(ctx, t, c.cs, client, corev1.PodSucceeded)
			out := podLogs(ctx, t, c.cs, client)
			t.Logf("client pod %s (%s) to server %s (%s on %s):\n%s", client.Name, client.Status.PodIP, server.Name, server.Status.PodIP, last.name, out)
			for _, want := range []string{"hello\npod=0\n", "outside=1\n", "host=1\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("client pod's output lacks %q: pods should reach pods (on every node) only", want)
				}
			}
		})
	}
	t.Run("from the daemon side", func(t *testing.T) {
		ns := c.env["KUBE_NETNS"]
		if ns == "" {
			t.Fatal("hack/kube.sh env printed no KUBE_NETNS")
		}
		conn, err := dialNetNS(ns, net.JoinHostPort(server.Status.PodIP, "8080"))
		if err != nil {
			t.Fatalf("dial pod %s on %s from %s: %v", server.Status.PodIP, last.name, ns, err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(io.LimitReader(conn, 64))
		if err != nil || string(got) != "hello\n" {
			t.Errorf("pod %s on %s answered %q, %v; want hello", server.Status.PodIP, last.name, got, err)
		}
	})
}

// dialNetNS dials addr over TCP from the network namespace ns, as
// listenNetNS listens there: the connection stays in ns.
func dialNetNS(ns, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		goruntime.LockOSThread() // not unlocked if the return fails: the thread ends with the goroutine
		c, err := func() (net.Conn, error) {
			target, err := os.Open(ns)
			if err != nil {
				return nil, err
			}
			defer target.Close()
			self, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				return nil, err
			}
			defer self.Close()
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				return nil, fmt.Errorf("setns %s: %w", ns, err)
			}
			c, cerr := net.DialTimeout("tcp", addr, 10*time.Second)
			if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
				if c != nil {
					c.Close()
				}
				return nil, fmt.Errorf("return from %s: %w", ns, err)
			}
			goruntime.UnlockOSThread()
			return c, cerr
		}()
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
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
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gvisor-kernel-", Labels: map[string]string{LabelManagedBy: testManagedBy}},
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
