package agentauth

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

var (
	podA        = PodIdentity{Namespace: "skillbox-ns", Name: "pod-a", UID: uidA}
	podB        = PodIdentity{Namespace: "skillbox-ns", Name: "pod-b", UID: uidB}
	podARenewed = PodIdentity{Namespace: "skillbox-ns", Name: "pod-a", UID: uidB} // pod-a deleted and created again
	daemon0     = DaemonIdentity{Instance: "skillbox-0"}
)

func newTestCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA(0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// podCert makes a pod's key and request as the agent does and has ca sign it.
func podCert(t testing.TB, ca *CA, id PodIdentity) tls.Certificate {
	t.Helper()
	keyPEM, csr, err := NewKeyAndCSR()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignPod(csr, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func daemonCert(t testing.TB, ca *CA, id DaemonIdentity) tls.Certificate {
	t.Helper()
	c, err := ca.IssueDaemon(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type serverResult struct {
	err  error
	peer DaemonIdentity
}

// handshake runs server and client over loopback TCP. The client counts as
// through only once it reads the server's first bytes: in TLS 1.3 the
// client finishes its handshake before the server has judged its
// certificate.
func handshake(t *testing.T, server, client *tls.Config) (serverResult, tls.ConnectionState, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan serverResult, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- serverResult{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, server)
		if err := tc.Handshake(); err != nil {
			done <- serverResult{err: err}
			return
		}
		peer, err := PeerDaemon(tc.ConnectionState())
		if err != nil {
			done <- serverResult{err: err}
			return
		}
		_, err = tc.Write([]byte("ok"))
		done <- serverResult{err: err, peer: peer}
	}()
	raw, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(raw, client)
	defer tc.Close()
	err = tc.Handshake()
	if err == nil {
		_, err = io.ReadFull(tc, make([]byte, 2))
	}
	cs := tc.ConnectionState()
	tc.Close()
	return <-done, cs, err
}

func TestMutualTLS(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	pool := ca.Pool()
	certA, certB, certARenewed := podCert(t, ca, podA), podCert(t, ca, podB), podCert(t, ca, podARenewed)
	certAOther := podCert(t, other, podA)
	d0, d0Other := daemonCert(t, ca, daemon0), daemonCert(t, other, daemon0)
	later := func() time.Time { return time.Now().Add(DefaultLeafLifetime + time.Hour) }

	for _, tc := range []struct {
		name        string
		serverCert  tls.Certificate
		clientCert  tls.Certificate
		tweakServer func(*tls.Config)
		tweakClient func(*tls.Config)
		wantClient  string // substring of the client's error; "" through
		wantServer  string // substring of the server's error; "" through
	}{
		{name: "daemon reaches pod A", serverCert: certA, clientCert: d0},
		{
			name: "pod B answers for pod A", serverCert: certB, clientCert: d0,
			wantClient: "pod certificate is for skillbox-ns/pod-b uid " + uidB + ", expected skillbox-ns/pod-a uid " + uidA,
			wantServer: "bad certificate",
		},
		{
			name: "pod A recreated under the same name", serverCert: certARenewed, clientCert: d0,
			wantClient: "pod certificate is for skillbox-ns/pod-a uid " + uidB + ", expected uid " + uidA + ": the pod was deleted and created again",
			wantServer: "bad certificate",
		},
		{
			name: "pod certificate from another CA", serverCert: certAOther, clientCert: d0,
			wantClient: "pod certificate skillbox://pod/skillbox-ns/pod-a/" + uidA + " is not signed by this skillbox CA",
			wantServer: "certificate",
		},
		{
			name: "daemon certificate from another CA", serverCert: certA, clientCert: d0Other,
			wantClient: "bad certificate",
			wantServer: "daemon certificate skillbox://daemon/skillbox-0 is not signed by this skillbox CA",
		},
		{
			name: "expired pod certificate", serverCert: certA, clientCert: d0,
			tweakClient: func(c *tls.Config) { c.Time = later },
			wantClient:  "has expired",
			wantServer:  "certificate",
		},
		{
			name: "expired daemon certificate", serverCert: certA, clientCert: d0,
			tweakServer: func(c *tls.Config) { c.Time = later },
			wantClient:  "certificate",
			wantServer:  "daemon certificate skillbox://daemon/skillbox-0 is valid from",
		},
		{
			name: "client without a certificate", serverCert: certA, clientCert: d0,
			tweakClient: func(c *tls.Config) { c.Certificates = nil },
			wantClient:  "certificate",
			wantServer:  "client didn't provide a certificate",
		},
		{
			name: "client with a pod certificate", serverCert: certA, clientCert: certB,
			wantClient: "bad certificate",
			wantServer: "daemon certificate skillbox://pod/skillbox-ns/pod-b/" + uidB + " is not valid for client auth",
		},
		{
			name: "daemon certificate as a server certificate", serverCert: d0, clientCert: d0,
			wantClient: "pod certificate skillbox://daemon/skillbox-0 is not valid for server auth",
			wantServer: "certificate",
		},
		{
			name: "client offers TLS 1.2 only", serverCert: certA, clientCert: d0,
			tweakClient: func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12 },
			wantClient:  "protocol version",
			wantServer:  "unsupported versions",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := AgentServerConfig(tc.serverCert, pool)
			client := DaemonClientConfig(tc.clientCert, pool, podA)
			if tc.tweakServer != nil {
				tc.tweakServer(server)
			}
			if tc.tweakClient != nil {
				tc.tweakClient(client)
			}
			srv, cs, clientErr := handshake(t, server, client)
			checkErr(t, "client", clientErr, tc.wantClient)
			checkErr(t, "server", srv.err, tc.wantServer)
			if tc.wantClient != "" || tc.wantServer != "" {
				return
			}
			if srv.peer != daemon0 {
				t.Errorf("PeerDaemon = %+v, want %+v", srv.peer, daemon0)
			}
			if cs.Version != tls.VersionTLS13 {
				t.Errorf("version %x, want TLS 1.3", cs.Version)
			}
			got, err := PeerPod(cs)
			if err != nil || got != podA {
				t.Errorf("PeerPod = %+v, %v; want %+v", got, err, podA)
			}
		})
	}
}

func checkErr(t *testing.T, side string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v, want it through", side, err)
	case want != "" && err == nil:
		t.Errorf("%s got through, want an error with %q", side, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s: %v\nwant an error with %q", side, err, want)
	}
}

func TestPeerIdentityBeforeHandshake(t *testing.T) {
	if _, err := PeerDaemon(tls.ConnectionState{}); err == nil {
		t.Error("PeerDaemon of an empty state: no error")
	}
	if _, err := PeerPod(tls.ConnectionState{}); err == nil {
		t.Error("PeerPod of an empty state: no error")
	}
}

func TestDaemonClientConfigInvalidWant(t *testing.T) {
	ca := newTestCA(t)
	cfg := DaemonClientConfig(daemonCert(t, ca, daemon0), ca.Pool(), PodIdentity{Namespace: "ns", Name: "Pod", UID: uidA})
	err := cfg.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{podCert(t, ca, podA).Leaf}})
	if err == nil || !strings.Contains(err.Error(), "expected pod identity") {
		t.Fatalf("VerifyConnection = %v, want the invalid expected identity named", err)
	}
}
