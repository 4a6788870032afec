package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	goruntime "runtime"
	"sync"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/process"
)

// Egress on a cluster: a run with egress rules gets an egress proxy of its
// own (egress.NewProxy), served by this daemon on a listener of its own at
// Options.EgressAddress on an ephemeral port, and a NetworkPolicy of its
// own that lets its pod reach that address and port and nothing else (no
// ingress at all). The proxy decides what the run reaches beyond, by its
// rules, as the local backends' proxies do, and reports every attempt; the
// policy keeps the pod from going around it. The policy is owned by the
// pod, so that the cluster's garbage collector removes it with the pod
// (the crash sweep needs nothing more); Destroy deletes it too. The
// listener takes connections from the pod's IP only: another pod that
// reached the address would still not get this run's proxy.
//
// A policy is only as good as the cluster's enforcement of NetworkPolicy
// (a CNI plugin or agent that enforces it); the namespace's deny-all
// policy (examples/kubernetes) is the floor it adds to.

// egressAddress is the address of o (Options.EgressAddress, else
// $SKILLBOX_EGRESS_ADDRESS); !IsValid when neither is set.
func egressAddress(o Options) (netip.Addr, error) {
	s, from := o.EgressAddress, "egress_address"
	if s == "" {
		s, from = os.Getenv(EnvEgressAddress), "$"+EnvEgressAddress
	}
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
		return netip.Addr{}, fmt.Errorf("%s %q is not an IP address pods can reach (one address, not 0.0.0.0 or ::): set it to the daemon's IP on the pods' network", from, s)
	}
	return a.Unmap(), nil
}

// podEgress is one run's proxy, on its listener.
type podEgress struct {
	proxy  *egress.Proxy
	l      net.Listener
	url    string
	port   int
	served chan struct{}

	once  sync.Once
	stats egress.Stats
}

// Over is closed when the run hits an egress cap.
func (e *podEgress) Over() <-chan struct{} { return e.proxy.Over() }

// Env is what the job's environment gets so that its clients use the
// proxy.
func (e *podEgress) Env() []string { return egress.ProxyEnv(e.url) }

// finish stops the proxy, waits until every attempt has been reported and
// returns the run's totals. Safe to call twice.
func (e *podEgress) finish() egress.Stats {
	e.once.Do(func() {
		e.stats = e.proxy.Shutdown()
		<-e.served
		// A Serve that began after the shutdown left its listener open.
		_ = e.l.Close()
	})
	return e.stats
}

// finishEgress ends the run's egress (nil: none) once its job is over and
// puts its figures and the reason they make (process.EgressReason, the
// local backends' rule) into res.
func finishEgress(e *podEgress, res *runtime.Result) {
	if e == nil {
		return
	}
	st := e.finish()
	if res == nil {
		return
	}
	res.Egress = &st
	res.Reason = process.EgressReason(res.Reason, st)
}

// canEgress says why the backend cannot serve a run's egress, or nil.
func (k *Kubernetes) canEgress() error {
	if !k.egressAddr.IsValid() {
		return errkind.Errorf(runtime.ErrUnavailable, "the run has egress rules, and the kubernetes runtime has no address its pods reach the egress proxy at: set runtime %q { egress_address = \"IP\" } to this daemon's IP on the pods' network (a daemon pod: $%s from the downward API's status.podIP)", Name, EnvEgressAddress)
	}
	return nil
}

// startEgress serves job's egress proxy for the pod name (uid, at podIP)
// and makes its NetworkPolicy.
func (k *Kubernetes) startEgress(ctx context.Context, cs k8s.Interface, name string, uid types.UID, podIP netip.Addr, job runtime.Job) (*podEgress, error) {
	if err := k.canEgress(); err != nil {
		return nil, err
	}
	cfg := job.Sandbox.EgressConfig()
	l, err := listenNetNS(k.ko.EgressNetNS, netip.AddrPortFrom(k.egressAddr, 0).String())
	if err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "egress proxy: listen on %s%s: %w: set runtime %q { egress_address } to an address of this daemon's", k.egressAddr, netNSNote(k.ko.EgressNetNS), err, Name)
	}
	port := l.Addr().(*net.TCPAddr).Port
	e := &podEgress{
		proxy:  egress.NewProxy(cfg),
		l:      &peerListener{Listener: l, peer: podIP, log: k.log},
		url:    fmt.Sprintf("http://%s", netip.AddrPortFrom(k.egressAddr, uint16(port))),
		port:   port,
		served: make(chan struct{}),
	}
	go func() {
		defer close(e.served)
		if err := e.proxy.Serve(e.l); err != nil {
			k.log.Warn("egress proxy", "pod", name, "err", err)
		}
	}()
	policy := egressPolicy(k.namespace, name, uid, k.egressAddr, port)
	if _, err := cs.NetworkingV1().NetworkPolicies(k.namespace).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		e.finish()
		return nil, fmt.Errorf("create the NetworkPolicy %s/%s of the pod's egress: %w", k.namespace, name, err)
	}
	k.log.Debug("egress proxy", "pod", name, "proxy", e.url, "pod_ip", podIP)
	return e, nil
}

func netNSNote(ns string) string {
	if ns == "" {
		return ""
	}
	return " in network namespace " + ns
}

// egressPolicy is the NetworkPolicy of the pod name (uid) whose proxy
// listens at addr:port: the pod may reach that address and port over TCP
// and nothing else, and nothing may reach it. The pod owns it.
func egressPolicy(namespace, name string, uid types.UID, addr netip.Addr, port int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	p := intstr.FromInt32(int32(port))
	yes := true
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels:    map[string]string{LabelManagedBy: ManagedBy, LabelRun: name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: name, UID: uid, Controller: &yes,
			}},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelRun: name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}},
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(addr, addr.BitLen()).String()}}},
			}},
		},
	}
}

// deletePolicy deletes the pod's NetworkPolicy, if it has one.
func (k *Kubernetes) deletePolicy(ctx context.Context, cs k8s.Interface, name string) error {
	err := cs.NetworkingV1().NetworkPolicies(k.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the NetworkPolicy %s/%s: %w", k.namespace, name, err)
	}
	return nil
}

// podIP is the IP of pod p, which runs.
func (k *Kubernetes) podIP(p *corev1.Pod) (netip.Addr, error) {
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return netip.Addr{}, errkind.Errorf(runtime.ErrUnavailable, "pod %s/%s has no IP (%q), and its egress proxy takes connections from the pod's IP only: its network is not set up", k.namespace, p.Name, p.Status.PodIP)
	}
	return ip.Unmap(), nil
}

// peerListener accepts connections from peer only, and closes others.
type peerListener struct {
	net.Listener
	peer netip.Addr
	log  runtime.Logger
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil && ap.Addr().Unmap() == l.peer {
			return c, nil
		}
		l.log.Warn("egress proxy: connection refused, not from the run's pod", "from", c.RemoteAddr().String(), "pod_ip", l.peer)
		c.Close()
	}
}

// errSetnsReturn: the thread could not return to the daemon's network
// namespace (it stays locked, and ends with its goroutine).
var errSetnsReturn = errors.New("cannot return to the daemon's network namespace")

// listenNetNS listens on addr over TCP in the network namespace ns ("":
// the daemon's own). The socket stays in ns; the proxy's dials upstream
// are made from the daemon's namespace.
func listenNetNS(ns, addr string) (net.Listener, error) {
	var l net.Listener
	err := withNetNS(ns, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// withNetNS calls f on a thread in the network namespace ns ("" the
// daemon's own), so that the sockets f makes are there; the thread goes
// back to the daemon's namespace after, or is never used again.
func withNetNS(ns string, f func() error) error {
	if ns == "" {
		return f()
	}
	done := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		err := func() error {
			target, err := os.Open(ns)
			if err != nil {
				return err
			}
			defer target.Close()
			self, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				return err
			}
			defer self.Close()
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns %s: %w", ns, err)
			}
			ferr := f()
			if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("%w: %v (and %v)", errSetnsReturn, err, ferr)
			}
			return ferr
		}()
		if !errors.Is(err, errSetnsReturn) {
			goruntime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}
