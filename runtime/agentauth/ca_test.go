package agentauth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCADirRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca := newTestCA(t)
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]fs.FileMode{dir: 0o700, filepath.Join(dir, CAKeyFile): 0o600, filepath.Join(dir, CACertFile): 0o600} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s is mode %04o, want %04o", p, st.Mode().Perm(), want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("%s holds %d entries, want ca.crt and ca.key only", dir, len(ents))
	}
	loaded, err := LoadCADir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Certificate().Equal(ca.Certificate()) {
		t.Fatal("loaded CA certificate differs from the saved one")
	}
	// A pod certificate from the loaded CA verifies against the original.
	leaf := podCert(t, loaded, podA).Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("certificate from the loaded CA: %v", err)
	}

	err = newTestCA(t).Save(dir)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Save over an existing CA = %v, want fs.ErrExist", err)
	}
	again, err := LoadCADir(dir)
	if err != nil || !again.Certificate().Equal(ca.Certificate()) {
		t.Fatalf("after the refused Save the CA in %s changed (%v)", dir, err)
	}
}

func TestLoadOrCreateCADir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	first, err := LoadOrCreateCADir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := LoadOrCreateCADir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Certificate().Equal(second.Certificate()) {
		t.Fatal("second LoadOrCreateCADir made a new CA instead of loading the first")
	}
	if err := os.Remove(filepath.Join(dir, CACertFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateCADir(dir, 0); err == nil {
		t.Fatal("LoadOrCreateCADir with a key but no certificate: no error")
	}
}

func TestCADirPermissions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keyMode fs.FileMode
		dirMode fs.FileMode // of an existing directory Save is given; 0 none
		want    string
	}{
		{name: "key readable by group", keyMode: 0o640, want: "mode 0640, open to group or others"},
		{name: "key readable by all", keyMode: 0o644, want: "defaultMode: 0400"},
		{name: "key writable by others", keyMode: 0o602, want: "mode 0602"},
		{name: "key read-only for owner", keyMode: 0o400},
		{name: "save into a group-readable directory", dirMode: 0o750, want: "mode 0750; want 0700"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ca")
			if tc.dirMode != 0 {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, tc.dirMode); err != nil {
					t.Fatal(err)
				}
				err := newTestCA(t).Save(dir)
				checkErr(t, "Save", err, tc.want)
				return
			}
			if err := newTestCA(t).Save(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(dir, CAKeyFile), tc.keyMode); err != nil {
				t.Fatal(err)
			}
			_, err := LoadCADir(dir)
			checkErr(t, "LoadCADir", err, tc.want)
		})
	}
}

func TestLoadCADirMissing(t *testing.T) {
	_, err := LoadCADir(filepath.Join(t.TempDir(), "none"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadCADir of a missing directory = %v, want fs.ErrNotExist", err)
	}
}

func TestLoadCA(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	certPEM, keyPEM, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := other.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	expired, err := NewCA(time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	expCert, expKey, err := expired.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	leaf := podCert(t, ca, podA)
	leafPEM := pemBlock("CERTIFICATE", leaf.Certificate[0])
	leafKey, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := x509.MarshalECPrivateKey(mustLoad(t, certPEM, keyPEM).key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		cert, key []byte
		want      string // "" loads
	}{
		{name: "round trip", cert: certPEM, key: keyPEM},
		{name: "SEC 1 key", cert: certPEM, key: pemBlock("EC PRIVATE KEY", ecKey)},
		{name: "empty certificate", cert: nil, key: keyPEM, want: "no PEM block found (want CERTIFICATE)"},
		{name: "not PEM", cert: []byte("hello"), key: keyPEM, want: "no PEM block found"},
		{name: "key in the certificate's place", cert: keyPEM, key: keyPEM, want: `PEM block is "PRIVATE KEY", want CERTIFICATE`},
		{name: "two certificates", cert: append(bytes.Clone(certPEM), certPEM...), key: keyPEM, want: "want one block only"},
		{name: "trailing garbage", cert: append(bytes.Clone(certPEM), "junk"...), key: keyPEM, want: "want one block only"},
		{name: "corrupt certificate", cert: pemBlock("CERTIFICATE", []byte("not DER")), key: keyPEM, want: "load CA certificate"},
		{name: "truncated PEM", cert: certPEM[:len(certPEM)/2], key: keyPEM, want: "no PEM block found"},
		{name: "corrupt key", cert: certPEM, key: pemBlock("PRIVATE KEY", []byte("not DER")), want: "load CA key"},
		{name: "certificate in the key's place", cert: certPEM, key: certPEM, want: `PEM block is "CERTIFICATE", want PRIVATE KEY`},
		{name: "key of another CA", cert: certPEM, key: otherKey, want: "come from different CAs"},
		{name: "leaf is not a CA", cert: leafPEM, key: pemBlock("PRIVATE KEY", leafKey), want: "is not a CA certificate"},
		{name: "expired CA", cert: expCert, key: expKey, want: "the CA certificate expired at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadCA(tc.cert, tc.key)
			checkErr(t, "LoadCA", err, tc.want)
			if err == nil && !got.Certificate().Equal(ca.Certificate()) {
				t.Fatal("loaded another certificate")
			}
		})
	}
}

func mustLoad(t *testing.T, certPEM, keyPEM []byte) *CA {
	t.Helper()
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestPoolFromPEM(t *testing.T) {
	a, b := newTestCA(t), newTestCA(t)
	leaf := podCert(t, a, podA)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{name: "one CA", in: a.CertPEM()},
		{name: "two CAs, as in a rotation", in: append(a.CertPEM(), b.CertPEM()...)},
		{name: "empty", in: nil, want: "no PEM certificate"},
		{name: "leaf", in: pemBlock("CERTIFICATE", leaf.Certificate[0]), want: "is not a CA certificate"},
		{name: "private key", in: pemBlock("PRIVATE KEY", []byte("x")), want: `is "PRIVATE KEY"`},
		{name: "trailing garbage", in: append(a.CertPEM(), "junk"...), want: "are not PEM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PoolFromPEM(tc.in)
			checkErr(t, "PoolFromPEM", err, tc.want)
		})
	}
}

// The CA's name constraints refuse any name but a skillbox identity, even on
// a certificate signed with the CA key outside SignPod and IssueDaemon.
func TestCANameConstraints(t *testing.T) {
	ca := newTestCA(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tmpl x509.Certificate
		ok   bool
	}{
		{name: "pod URI", tmpl: x509.Certificate{URIs: []*url.URL{podA.uri()}}, ok: true},
		{name: "DNS name", tmpl: x509.Certificate{DNSNames: []string{"example.com"}}},
		{name: "IPv4 address", tmpl: x509.Certificate{IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}},
		{name: "IPv6 address", tmpl: x509.Certificate{IPAddresses: []net.IP{net.IPv6loopback}}},
		{name: "email", tmpl: x509.Certificate{EmailAddresses: []string{"a@example.com"}}},
		{name: "URI of another host", tmpl: x509.Certificate{URIs: []*url.URL{{Scheme: "https", Host: "example.com"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := tc.tmpl
			tmpl.SerialNumber = big.NewInt(1)
			tmpl.Subject = pkix.Name{CommonName: tc.name}
			tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca.cert, key.Public(), ca.key)
			if err != nil {
				t.Fatal(err)
			}
			c, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if tc.ok != (err == nil) {
				t.Fatalf("Verify = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func TestSignPod(t *testing.T) {
	ca := newTestCA(t)
	_, csr, err := NewKeyAndCSR()
	if err != nil {
		t.Fatal(err)
	}
	// A request that asks for names of its own: they must not reach the
	// certificate.
	greedyKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	greedy, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "skillbox://daemon/skillbox-0"},
		DNSNames:    []string{"example.com"},
		IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)},
		URIs:        []*url.URL{podB.uri(), daemon0.uri()},
	}, greedyKey)
	if err != nil {
		t.Fatal(err)
	}
	badSig := bytes.Clone(csr)
	badSig[len(badSig)-3] ^= 0xff
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaCSR, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p224CSR, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, p224)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		csr      []byte
		id       PodIdentity
		lifetime time.Duration
		want     string // "" signs
	}{
		{name: "default lifetime", csr: csr, id: podA},
		{name: "one hour", csr: csr, id: podA, lifetime: time.Hour},
		{name: "request's own names ignored", csr: greedy, id: podA},
		{name: "corrupt request", csr: []byte("not DER"), id: podA, want: "parse request"},
		{name: "empty request", csr: nil, id: podA, want: "parse request"},
		{name: "request too large", csr: make([]byte, MaxCSR+1), id: podA, want: "at most 4096"},
		{name: "request not signed by its key", csr: badSig, id: podA, want: "not signed by its own key"},
		{name: "RSA key", csr: rsaCSR, id: podA, want: "want ECDSA P-256"},
		{name: "P-224 key", csr: p224CSR, id: podA, want: "ECDSA on P-224"},
		{name: "invalid identity", csr: csr, id: PodIdentity{Namespace: "ns", Name: "pod-a", UID: "1"}, want: "pod uid"},
		{name: "negative lifetime", csr: csr, id: podA, lifetime: -time.Hour, want: "is negative"},
		{name: "lifetime too long", csr: csr, id: podA, lifetime: MaxLeafLifetime + time.Second, want: "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, err := ca.SignPod(tc.csr, tc.id, tc.lifetime)
			checkErr(t, "SignPod", err, tc.want)
			if err != nil {
				return
			}
			der, err := decodeOne(certPEM, "CERTIFICATE")
			if err != nil {
				t.Fatal(err)
			}
			c, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.URIs) != 1 || c.URIs[0].String() != tc.id.String() || len(c.DNSNames)+len(c.IPAddresses)+len(c.EmailAddresses) != 0 {
				t.Errorf("names: URIs %v DNS %v IP %v email %v; want %s only", c.URIs, c.DNSNames, c.IPAddresses, c.EmailAddresses, tc.id)
			}
			if len(c.ExtKeyUsage) != 1 || c.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || c.IsCA {
				t.Errorf("usage %v, CA %v; want server auth only", c.ExtKeyUsage, c.IsCA)
			}
			want := tc.lifetime
			if want == 0 {
				want = DefaultLeafLifetime
			}
			if got := c.NotAfter.Sub(c.NotBefore) - clockSkew; got < want-time.Minute || got > want+time.Minute {
				t.Errorf("lifetime %v, want %v", got, want)
			}
		})
	}
}

func TestIssueDaemon(t *testing.T) {
	ca := newTestCA(t)
	c, err := ca.IssueDaemon(daemon0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Leaf.URIs) != 1 || c.Leaf.URIs[0].String() != "skillbox://daemon/skillbox-0" {
		t.Errorf("URIs %v", c.Leaf.URIs)
	}
	if len(c.Leaf.ExtKeyUsage) != 1 || c.Leaf.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("usage %v, want client auth only", c.Leaf.ExtKeyUsage)
	}
	if _, err := ca.IssueDaemon(DaemonIdentity{Instance: "Skillbox_0"}, 0); err == nil || !strings.Contains(err.Error(), "daemon instance") {
		t.Errorf("IssueDaemon of an invalid instance = %v", err)
	}
}

// A leaf may not outlive its CA, and an expired CA signs nothing.
func TestCAExpiry(t *testing.T) {
	ca, err := NewCA(2 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.IssueDaemon(daemon0, 3*time.Hour); err == nil || !strings.Contains(err.Error(), "would outlive the CA") {
		t.Errorf("a leaf longer than the CA = %v", err)
	}
	if _, err := ca.IssueDaemon(daemon0, time.Hour); err != nil {
		t.Errorf("a leaf within the CA's life: %v", err)
	}
	ca.now = func() time.Time { return time.Now().Add(3 * time.Hour) }
	if _, err := ca.IssueDaemon(daemon0, time.Minute); err == nil || !strings.Contains(err.Error(), "the CA certificate expired") {
		t.Errorf("an expired CA signing = %v", err)
	}
}

// SignPod parses a request that comes from a pod. Whatever the bytes, it
// must not panic, and what it signs names only the identity it was given.
func FuzzSignPod(f *testing.F) {
	ca := newTestCA(f)
	_, csr, err := NewKeyAndCSR()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(csr)
	f.Add(csr[:len(csr)/2])
	f.Add([]byte{0x30, 0x82, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		certPEM, err := ca.SignPod(b, podA, time.Hour)
		if err != nil {
			return
		}
		der, err := decodeOne(certPEM, "CERTIFICATE")
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		id, err := podIdentityOf(c)
		if err != nil || id != podA {
			t.Fatalf("signed certificate names %+v (%v), want %+v", id, err, podA)
		}
	})
}
