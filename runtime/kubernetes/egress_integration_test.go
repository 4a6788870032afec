//go:build integration

package kubernetes

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// egressProbe is the job of the egress tests: it fetches each URL of its
// first argument (a JSON list) through the proxy its environment names,
// then tries each direct HOST:PORT of its second (bypassing the proxy),
// and prints what happened as JSON.
const egressProbe = `import json, os, socket, sys, urllib.request
out = {"proxy": os.environ.get("HTTP_PROXY", ""), "fetch": {}, "direct": {}}
for u in json.loads(sys.argv[1]):
    try:
        out["fetch"][u] = "ok: " + urllib.request.urlopen(u, timeout=10).read().decode()
    except Exception as e:
        out["fetch"][u] = "error: %s" % e
for hp in json.loads(sys.argv[2]):
    host, port = hp.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        out["direct"][hp] = "connected"
    except Exception as e:
        out["direct"][hp] = "failed: %s" % e
print(json.dumps(out))
sys.stdout.flush()
if len(sys.argv) > 3:
    import time; time.sleep(float(sys.argv[3]))
`

type probeOut struct {
	Proxy  string            `json:"proxy"`
	Fetch  map[string]string `json:"fetch"`
	Direct map[string]string `json:"direct"`
}

// TestEgress runs jobs with egress rules on the test cluster: the daemon
// side (this test) serves each run's proxy on the node's address, in the
// node's network namespace, and an upstream on the host's loopback that
// only the proxy reaches.
func TestEgress(t *testing.T) {
	img := pythonImage(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	c.ensureNamespace(ctx, t)
	c.importImage(ctx, t, img)

	// The upstream, on the host's loopback: pods cannot reach it, the
	// proxy (dialling from this process's namespace) can.
	upL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "page %s", r.URL.Path)
	})}
	go upstream.Serve(upL)
	defer upstream.Close()
	upPort := upL.Addr().(*net.TCPAddr).Port

	nodeIP, nodeNS := testNode(ctx, t, c)
	t.Logf("egress proxies on %s in %s; upstream on %s", nodeIP, nodeNS, upL.Addr())
	k, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig, EgressAddress: nodeIP.String(), EgressNetNS: nodeNS}})
	if err != nil {
		t.Fatal(err)
	}

	// Every attempt the proxies report.
	var mu sync.Mutex
	var attempts []egress.Attempt
	loopback := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	allowed, other := "allowed.test", "other.test"
	rule, err := egress.ParseRule(fmt.Sprintf("%s:%d", allowed, upPort))
	if err != nil {
		t.Fatal(err)
	}
	egressCfg := func() *egress.Config {
		return &egress.Config{
			Rules: []egress.Rule{rule},
			Hosts: map[string][]netip.Addr{allowed: loopback, other: loopback},
			Report: func(a egress.Attempt) {
				mu.Lock()
				attempts = append(attempts, a)
				mu.Unlock()
			},
		}
	}
	urlOf := func(host string) string { return fmt.Sprintf("http://%s:%d/p", host, upPort) }
	args := func(fetch, direct []string, sleep ...string) []string {
		f, _ := json.Marshal(fetch)
		d, _ := json.Marshal(direct)
		return append([]string{"python3", "-c", egressProbe, string(f), string(d)}, sleep...)
	}
	probe := func(t *testing.T, res *runtime.Result) probeOut {
		t.Helper()
		t.Logf("reason %s exit %d egress %+v\nstdout %s\nstderr %s", res.Reason, res.ExitCode, res.Egress, res.Stdout, res.Stderr)
		line, _, _ := strings.Cut(string(res.Stdout), "\n")
		var out probeOut
		if err := json.Unmarshal([]byte(line), &out); err != nil {
			t.Fatalf("the probe's output %q: %v", res.Stdout, err)
		}
		return out
	}

	// A server pod, and the node's kubelet port: a pod without a policy
	// reaches both over the pod network (the control), so a run's pod
	// that does not is held by its policy.
	server := createPod(ctx, t, c.cs, shellPod("egress-peer", "while true; do nc -l -p 8080 -e /bin/echo hello; done"))
	server = waitPod(ctx, t, c.cs, server, corev1.PodRunning)
	direct := []string{
		fmt.Sprintf("%s:%d", nodeIP, 10250),             // the proxy's host, another port (the kubelet's)
		fmt.Sprintf("%s:%d", server.Status.PodIP, 8080), // another pod
	}
	var script strings.Builder
	for i, hp := range direct {
		host, port, _ := strings.Cut(hp, ":")
		fmt.Fprintf(&script, "echo | nc -w 5 %s %s >/dev/null; echo \"%d=$?\"; ", host, port, i)
	}
	control := createPod(ctx, t, c.cs, shellPod("egress-control", script.String()))
	waitPod(ctx, t, c.cs, control, corev1.PodSucceeded)
	if out := podLogs(ctx, t, c.cs, control); out != "0=0\n1=0\n" {
		t.Fatalf("a pod without a policy does not reach %v (exit codes %q, want 0 each): the enforcement check would prove nothing", direct, out)
	}

	t.Run("AllowedDeniedAndPolicy", func(t *testing.T) {
		id := fmt.Sprintf("kube-egress-%d", time.Now().UnixNano())
		lim := runtime.Limits{Timeout: time.Minute}
		sb, err := k.Create(ctx, runtime.SandboxSpec{ID: id, Image: img, Limits: lim, Egress: egressCfg(), Boot: runtime.BootCold})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy(ctx)
		if err := sb.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sb.Deliver(ctx, runtime.Invocation{Args: args([]string{urlOf(allowed), urlOf(other)}, direct), Limits: lim}); err != nil {
			t.Fatal(err)
		}
		res, err := sb.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := probe(t, res)
		if res.Reason != runtime.ReasonExit || res.ExitCode != 0 {
			t.Errorf("reason %s exit %d, want exit 0", res.Reason, res.ExitCode)
		}
		if got := out.Fetch[urlOf(allowed)]; got != "ok: page /p" {
			t.Errorf("the allowed fetch: %q, want the page through the proxy", got)
		}
		if got := out.Fetch[urlOf(other)]; !strings.Contains(got, "403") {
			t.Errorf("the fetch no rule allows: %q, want the proxy's 403", got)
		}
		if st := res.Egress; st == nil || st.Connections != 1 || st.Denied != 1 || st.LimitHit != "" {
			t.Errorf("egress stats %+v, want 1 connection and 1 denied", st)
		}
		mu.Lock()
		var sawAllowed, sawDenied bool
		for _, a := range attempts {
			sawAllowed = sawAllowed || a.Allowed && a.Host == allowed
			sawDenied = sawDenied || !a.Allowed && a.Host == other
		}
		attempts = nil
		mu.Unlock()
		if !sawAllowed || !sawDenied {
			t.Errorf("attempts reported: allowed %s %v, denied %s %v; want both", allowed, sawAllowed, other, sawDenied)
		}

		// The run's policy: exactly its pod, to the proxy's address and
		// port, owned by the pod.
		proxy, err := url.Parse(out.Proxy)
		if err != nil || proxy.Hostname() != nodeIP.String() {
			t.Fatalf("the job's HTTP_PROXY %q, want http://%s:PORT", out.Proxy, nodeIP)
		}
		name := podName(id)
		pol, err := c.cs.NetworkingV1().NetworkPolicies(DefaultNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the run's NetworkPolicy: %v", err)
		}
		pod, err := c.cs.CoreV1().Pods(DefaultNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := pol.Spec.Egress
		if pol.Spec.PodSelector.MatchLabels[LabelRun] != name || len(pol.Spec.Ingress) != 0 || len(r) != 1 || len(r[0].To) != 1 ||
			r[0].To[0].IPBlock == nil || r[0].To[0].IPBlock.CIDR != nodeIP.String()+"/32" || len(r[0].Ports) != 1 || r[0].Ports[0].Port.String() != proxy.Port() {
			t.Errorf("policy %+v, want egress to %s/32 port %s only", pol.Spec, nodeIP, proxy.Port())
		}
		if o := pol.OwnerReferences; len(o) != 1 || o[0].UID != pod.UID {
			t.Errorf("policy owners %+v, want the pod %s", o, pod.UID)
		}

		// Enforcement: the pod's other connections, bypassing the proxy.
		t.Run("Enforcement", func(t *testing.T) {
			var through []string
			for _, hp := range direct {
				if out.Direct[hp] == "connected" {
					through = append(through, hp)
				}
			}
			if len(through) == len(direct) {
				// Every one went through, as the control's did: nothing
				// in the cluster enforces NetworkPolicy. Said loudly,
				// never passed.
				t.Skipf("NOT ENFORCED: the run's pod reached %v directly: the test cluster has no NetworkPolicy enforcer (kube-network-policies needs the kernel's nftables queue expression, CONFIG_NFT_QUEUE; this kernel: %s); the policy object is checked above, the proxy path is real", through, kernelOption("CONFIG_NFT_QUEUE"))
			}
			if len(through) > 0 {
				t.Errorf("the run's pod reached %v directly, bypassing its proxy, while its policy blocked the rest (%v)", through, out.Direct)
			}
		})

		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.cs.NetworkingV1().NetworkPolicies(DefaultNamespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the run's NetworkPolicy after the run: %v, want it gone", err)
		}
		noPodsLeft(ctx, t, c, id)
	})

	t.Run("PolicyGoesWithThePod", func(t *testing.T) {
		// A pod deleted mid-run from outside (as after a crash, by the
		// sweep) takes its policy with it: the garbage collector removes
		// what the pod owns, and the run ends killed.
		id := fmt.Sprintf("kube-egress-gc-%d", time.Now().UnixNano())
		lim := runtime.Limits{Timeout: 2 * time.Minute}
		sb, err := k.Create(ctx, runtime.SandboxSpec{ID: id, Image: img, Limits: lim, Egress: egressCfg(), Boot: runtime.BootCold})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy(ctx)
		if err := sb.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sb.Deliver(ctx, runtime.Invocation{Args: args([]string{urlOf(allowed)}, []string{}, "60"), Limits: lim}); err != nil {
			t.Fatal(err)
		}
		name := podName(id)
		if _, err := c.cs.NetworkingV1().NetworkPolicies(DefaultNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("the run's NetworkPolicy: %v", err)
		}
		zero := int64(0)
		if err := c.cs.CoreV1().Pods(DefaultNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		res, err := sb.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Reason != runtime.ReasonKilled || res.Egress == nil {
			t.Errorf("reason %s egress %+v, want killed with the egress figures", res.Reason, res.Egress)
		}
		start := time.Now()
		waitfor.NoError(t, "the garbage collector to take the policy of the deleted pod "+name, time.Minute, func() error {
			_, err := c.cs.NetworkingV1().NetworkPolicies(DefaultNamespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("the policy is still there (%v)", err)
		})
		t.Logf("the policy was gone %s after the run ended (its pod deleted mid-run; Destroy not yet called)", time.Since(start).Round(10*time.Millisecond))
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		noPodsLeft(ctx, t, c, id)
	})

	t.Run("Cap", func(t *testing.T) {
		// One connection allowed; the second hits the cap, which stops
		// the job (it would sleep for a minute).
		job := runtime.Job{
			Sandbox: runtime.SandboxSpec{ID: fmt.Sprintf("kube-egress-cap-%d", time.Now().UnixNano()), Image: img, Egress: egressCfg(),
				Limits: runtime.Limits{EgressConnections: 1}},
			Invocation: runtime.Invocation{Args: args([]string{urlOf(allowed), urlOf(allowed)}, []string{}, "60"), Limits: runtime.Limits{Timeout: 2 * time.Minute}},
		}
		start := time.Now()
		res, err := k.Run(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		// The job may be stopped before it prints: its output is not
		// looked at.
		t.Logf("reason %s exit %d egress %+v\nstdout %s\nstderr %s", res.Reason, res.ExitCode, res.Egress, res.Stdout, res.Stderr)
		if res.Reason != runtime.ReasonEgressCap || time.Since(start) > 50*time.Second {
			t.Errorf("reason %s after %s, want egress_cap well before the job's minute of sleep", res.Reason, time.Since(start).Round(time.Second))
		}
		if st := res.Egress; st == nil || st.Connections != 1 || st.LimitHit != egress.LimitConnections {
			t.Errorf("egress stats %+v, want 1 connection and the limit %s hit", st, egress.LimitConnections)
		}
		noPolicyLeft(ctx, t, c)
		noPodsLeft(ctx, t, c, job.Sandbox.ID)
	})

	t.Run("Refused", func(t *testing.T) {
		// An open network is refused; so is egress with no address for
		// the proxy, before any pod is made.
		open := runtime.Job{Sandbox: runtime.SandboxSpec{ID: fmt.Sprintf("kube-net-%d", time.Now().UnixNano()), Image: img, Network: true}, Invocation: runtime.Invocation{Args: []string{"true"}}}
		if _, err := k.Run(ctx, open); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "open network") {
			t.Errorf("a job with an open network: %v, want ErrUnavailable saying why", err)
		}
		t.Setenv(EnvEgressAddress, "")
		bare, err := New(runtime.Options{Backend: Options{Kubeconfig: c.kubeconfig}})
		if err != nil {
			t.Fatal(err)
		}
		job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: fmt.Sprintf("kube-noaddr-%d", time.Now().UnixNano()), Image: img, Egress: egressCfg()}, Invocation: runtime.Invocation{Args: []string{"true"}}}
		if _, err := bare.Run(ctx, job); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "egress_address") {
			t.Errorf("egress without egress_address: %v, want ErrUnavailable naming the setting", err)
		}
		noPodsLeft(ctx, t, c, job.Sandbox.ID)
	})
}

// kernelOption is the line of /proc/config.gz that sets name, or why
// there is none.
func kernelOption(name string) string {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return err.Error()
	}
	b, err := io.ReadAll(z)
	if err != nil {
		return err.Error()
	}
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, name+"=") || strings.HasPrefix(line, "# "+name+" ") {
			return strings.TrimSpace(line)
		}
	}
	return name + " not in /proc/config.gz"
}

// noPolicyLeft: no NetworkPolicy of skillbox's runs is left.
func noPolicyLeft(ctx context.Context, t *testing.T, c *testCluster) {
	t.Helper()
	pols, err := c.cs.NetworkingV1().NetworkPolicies(DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pols.Items {
		t.Errorf("NetworkPolicy %s left after its run", p.Name)
	}
}

// testNode is the address of the test cluster's node 1, where pods of
// every node reach it, and the path of its network namespace (hack/kube.sh
// env: KUBE_NODE_1_IP, KUBE_NODE_1_NETNS), where the daemon side's
// listeners go.
func testNode(ctx context.Context, t testing.TB, c *testCluster) (netip.Addr, string) {
	t.Helper()
	n := c.nodes[0]
	node, err := c.cs.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node %s: %v", n.name, err)
	}
	var ip netip.Addr
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip, _ = netip.ParseAddr(a.Address)
		}
	}
	if !ip.IsValid() || ip.String() != n.ip {
		t.Fatalf("node %s has InternalIP %v, hack/kube.sh env says %s: %+v", n.name, ip, n.ip, node.Status.Addresses)
	}
	return ip, n.netns
}
