package agentauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/url"
	"time"
)

// MaxCSR bounds the certificate request SignPod parses: a request for a
// P-256 key is about 200 bytes, and it comes from a pod, which is not
// trusted.
const MaxCSR = 4 << 10

// NewKeyAndCSR makes the agent's key (ECDSA P-256) and a certificate request
// for it, signed by it to prove the agent holds the key. The key stays in the
// pod; the request goes to the daemon, which ignores every name in it.
func NewKeyAndCSR() (keyPEM, csrDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate agent key: %w", err)
	}
	csrDER, err = x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "skillbox agent"},
	}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("make agent certificate request: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode agent key: %w", err)
	}
	return pemBlock("PRIVATE KEY", keyDER), csrDER, nil
}

// SignPod signs the pod's certificate request for identity id, which the
// daemon decided (the UID is the one it read from the API server). Only the
// request's public key and signature count: its subject, names and
// extensions are ignored, and the certificate carries id as its only name.
// It is valid for TLS server auth only, for lifetime (DefaultLeafLifetime if
// 0, at most MaxLeafLifetime), and cannot outlive the CA.
func (ca *CA) SignPod(csrDER []byte, id PodIdentity, lifetime time.Duration) (certPEM []byte, err error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("sign pod certificate: %w", err)
	}
	if len(csrDER) > MaxCSR {
		return nil, fmt.Errorf("sign pod certificate for %s: request is %d bytes, at most %d", id.describe(), len(csrDER), MaxCSR)
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, fmt.Errorf("sign pod certificate for %s: parse request: %w", id.describe(), err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("sign pod certificate for %s: the request is not signed by its own key: %w", id.describe(), err)
	}
	if err := checkLeafKey(csr.PublicKey); err != nil {
		return nil, fmt.Errorf("sign pod certificate for %s: %w", id.describe(), err)
	}
	der, err := ca.issue(id.String(), id.uri(), x509.ExtKeyUsageServerAuth, csr.PublicKey, lifetime)
	if err != nil {
		return nil, fmt.Errorf("sign pod certificate for %s: %w", id.describe(), err)
	}
	return pemBlock("CERTIFICATE", der), nil
}

// IssueDaemon makes a key and a certificate for daemon replica id, valid
// for TLS client auth only, for lifetime (as SignPod). The key is made here,
// in the daemon that holds the CA, and need never be written anywhere.
func (ca *CA) IssueDaemon(id DaemonIdentity, lifetime time.Duration) (tls.Certificate, error) {
	if err := id.Validate(); err != nil {
		return tls.Certificate{}, fmt.Errorf("issue daemon certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue daemon certificate for %s: generate key: %w", id.Instance, err)
	}
	der, err := ca.issue(id.String(), id.uri(), x509.ExtKeyUsageClientAuth, key.Public(), lifetime)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue daemon certificate for %s: %w", id.Instance, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue daemon certificate for %s: parse own certificate: %w", id.Instance, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// issue signs a leaf for pub that names only u and serves only usage.
func (ca *CA) issue(cn string, u *url.URL, usage x509.ExtKeyUsage, pub crypto.PublicKey, lifetime time.Duration) ([]byte, error) {
	switch {
	case lifetime == 0:
		lifetime = DefaultLeafLifetime
	case lifetime < 0:
		return nil, fmt.Errorf("lifetime %v is negative", lifetime)
	case lifetime > MaxLeafLifetime:
		return nil, fmt.Errorf("lifetime %v is longer than the %v a leaf certificate may live", lifetime, MaxLeafLifetime)
	}
	if err := ca.checkValid(); err != nil {
		return nil, err
	}
	now := ca.now()
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.cert.NotAfter) {
		return nil, fmt.Errorf("a certificate for %v would outlive the CA, which expires at %s; make a new CA", lifetime, ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The common name is for people reading the certificate; nothing
		// checks it.
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
		URIs:                  []*url.URL{u},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return der, nil
}

// checkLeafKey accepts the key types TLS 1.3 signs with that are worth
// trusting: ECDSA on P-256 or P-384, and Ed25519.
func checkLeafKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
		return fmt.Errorf("the request's key is ECDSA on %s; want P-256, P-384 or Ed25519", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return nil
	default:
		return fmt.Errorf("the request's key is %T; want ECDSA P-256, P-384 or Ed25519", pub)
	}
}
