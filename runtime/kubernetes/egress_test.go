package kubernetes

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
)

func TestEgressAddress(t *testing.T) {
	for _, tc := range []struct {
		name, opt, env string
		want           string // "" for none
		err            string
	}{
		{"none", "", "", "", ""},
		{"option", "10.1.2.3", "", "10.1.2.3", ""},
		{"env", "", "10.9.9.9", "10.9.9.9", ""},
		{"option over env", "10.1.2.3", "10.9.9.9", "10.1.2.3", ""},
		{"v6", "fd00::1", "", "fd00::1", ""},
		{"v4 in v6", "::ffff:10.1.2.3", "", "10.1.2.3", ""},
		{"unspecified", "0.0.0.0", "", "", "egress_address \"0.0.0.0\""},
		{"not an address", "daemon.local", "", "", "not an IP address"},
		{"bad env", "", "x", "", "$" + EnvEgressAddress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvEgressAddress, tc.env)
			a, err := egressAddress(Options{EgressAddress: tc.opt})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("egressAddress = %v, %v; want an error saying %q", a, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ""; a.IsValid() {
				got = a.String()
				if got != tc.want {
					t.Errorf("egressAddress = %s, want %s", got, tc.want)
				}
			} else if tc.want != "" {
				t.Errorf("egressAddress = none, want %s", tc.want)
			}
		})
	}
}

// The policy selects exactly the run's pod, lets it reach the proxy's
// address and port over TCP and nothing else, lets nothing reach it, and
// is owned by the pod.
func TestEgressPolicy(t *testing.T) {
	for _, tc := range []struct {
		addr, cidr string
	}{
		{"10.224.0.2", "10.224.0.2/32"},
		{"fd00::7", "fd00::7/128"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			p := egressPolicy("ns1", "run-1", "uid-1", netip.MustParseAddr(tc.addr), 40001)
			if p.Namespace != "ns1" || p.Name != "run-1" {
				t.Errorf("policy %s/%s, want ns1/run-1", p.Namespace, p.Name)
			}
			if sel := p.Spec.PodSelector; len(sel.MatchLabels) != 1 || sel.MatchLabels[LabelRun] != "run-1" || len(sel.MatchExpressions) != 0 {
				t.Errorf("pod selector %v, want exactly %s=run-1", sel, LabelRun)
			}
			types := p.Spec.PolicyTypes
			if len(types) != 2 || types[0] != networkingv1.PolicyTypeIngress || types[1] != networkingv1.PolicyTypeEgress {
				t.Errorf("policy types %v, want Ingress and Egress", types)
			}
			if len(p.Spec.Ingress) != 0 {
				t.Errorf("ingress %v, want none", p.Spec.Ingress)
			}
			if len(p.Spec.Egress) != 1 {
				t.Fatalf("egress rules %v, want one", p.Spec.Egress)
			}
			r := p.Spec.Egress[0]
			if len(r.To) != 1 || r.To[0].IPBlock == nil || r.To[0].IPBlock.CIDR != tc.cidr || len(r.To[0].IPBlock.Except) != 0 ||
				r.To[0].PodSelector != nil || r.To[0].NamespaceSelector != nil {
				t.Errorf("egress to %+v, want only the ipBlock %s", r.To, tc.cidr)
			}
			if len(r.Ports) != 1 || r.Ports[0].Protocol == nil || *r.Ports[0].Protocol != "TCP" || r.Ports[0].Port == nil ||
				r.Ports[0].Port.IntValue() != 40001 || r.Ports[0].EndPort != nil {
				t.Errorf("egress ports %+v, want TCP 40001 only", r.Ports)
			}
			owners := p.OwnerReferences
			if len(owners) != 1 || owners[0].Kind != "Pod" || owners[0].APIVersion != "v1" || owners[0].Name != "run-1" || owners[0].UID != "uid-1" {
				t.Errorf("owners %+v, want the pod run-1 (uid-1)", owners)
			}
		})
	}
}

// The proxy's listener hands on connections from the pod's IP only.
func TestPeerListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		peer string
		pass bool
	}{
		{"the pod", "127.0.0.1", true},
		{"another address", "127.0.0.2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &peerListener{Listener: raw, peer: netip.MustParseAddr(tc.peer), log: nopLogger{}}
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := l.Accept()
				if err == nil {
					accepted <- c
				}
			}()
			c, err := net.Dial("tcp", raw.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			select {
			case a := <-accepted:
				a.Close()
				if !tc.pass {
					t.Errorf("a connection from 127.0.0.1 was accepted for the pod %s", tc.peer)
				}
			case <-time.After(500 * time.Millisecond):
				if tc.pass {
					t.Errorf("the pod's connection was not accepted")
				}
				// The refused connection was closed.
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if n, err := c.Read(make([]byte, 1)); err == nil {
					t.Errorf("read %d bytes on a refused connection", n)
				}
			}
		})
	}
	raw.Close()
}

type nopLogger struct{}

func (nopLogger) Debug(string, ...any) {}
func (nopLogger) Info(string, ...any)  {}
func (nopLogger) Warn(string, ...any)  {}
func (nopLogger) Error(string, ...any) {}
