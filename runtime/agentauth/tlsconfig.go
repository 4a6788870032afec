package agentauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// DaemonClientConfig is the daemon's side of a connection to the agent in
// pod want: it presents daemonCert, and accepts the agent only if its
// certificate chains to a CA in caPool, is for server auth, and names
// exactly want, UID included. Host names, DNS names and IP addresses in the
// certificate play no part. TLS 1.3 only, no session resumption.
//
// Set the returned config's Time to verify at another time than now.
func DaemonClientConfig(daemonCert tls.Certificate, caPool *x509.CertPool, want PodIdentity) *tls.Config {
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{daemonCert},
		// The standard verification checks a host name, which a pod's
		// certificate does not carry; VerifyConnection verifies the chain
		// and the identity instead, on every handshake.
		InsecureSkipVerify: true,
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := want.Validate(); err != nil {
			return fmt.Errorf("expected pod identity: %w", err)
		}
		leaf, err := verifyPeer(cs, caPool, x509.ExtKeyUsageServerAuth, now(cfg), "pod")
		if err != nil {
			return err
		}
		got, err := podIdentityOf(leaf)
		if err != nil {
			return err
		}
		if got == want {
			return nil
		}
		if got.Namespace == want.Namespace && got.Name == want.Name {
			return fmt.Errorf("pod certificate is for %s, expected uid %s: the pod was deleted and created again under the same name, and the new pod needs a certificate of its own", got.describe(), want.UID)
		}
		return fmt.Errorf("pod certificate is for %s, expected %s: another pod answered at this address", got.describe(), want.describe())
	}
	return cfg
}

// AgentServerConfig is the agent's side: it presents podCert and requires a
// client certificate that chains to a CA in caPool, is for client auth and
// names a daemon (any replica). TLS 1.3 only; session tickets are off, so
// every connection is verified in full. PeerDaemon names the replica after
// the handshake.
//
// Set the returned config's Time to verify at another time than now.
func AgentServerConfig(podCert tls.Certificate, caPool *x509.CertPool) *tls.Config {
	cfg := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		MaxVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{podCert},
		ClientAuth:             tls.RequireAnyClientCert, // verified below, with errors that say why
		SessionTicketsDisabled: true,
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		leaf, err := verifyPeer(cs, caPool, x509.ExtKeyUsageClientAuth, now(cfg), "daemon")
		if err != nil {
			return err
		}
		_, err = daemonIdentityOf(leaf)
		return err
	}
	return cfg
}

// PeerDaemon returns the daemon replica at the other end of a connection
// accepted with AgentServerConfig, for the audit log. It does not verify the
// certificate again: the handshake did.
func PeerDaemon(cs tls.ConnectionState) (DaemonIdentity, error) {
	if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
		return DaemonIdentity{}, errors.New("peer daemon: no completed handshake with a client certificate")
	}
	return daemonIdentityOf(cs.PeerCertificates[0])
}

// PeerPod returns the pod at the other end of a connection dialed with
// DaemonClientConfig. It does not verify the certificate again: the
// handshake did.
func PeerPod(cs tls.ConnectionState) (PodIdentity, error) {
	if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
		return PodIdentity{}, errors.New("peer pod: no completed handshake with a server certificate")
	}
	return podIdentityOf(cs.PeerCertificates[0])
}

func now(cfg *tls.Config) time.Time {
	if cfg.Time != nil {
		return cfg.Time()
	}
	return time.Now()
}

// verifyPeer verifies the peer's leaf certificate against pool for usage at
// t and says, in an operator's words, what failed. Certificates the peer
// sends after its leaf are ignored: the CA signs leaves only.
func verifyPeer(cs tls.ConnectionState, pool *x509.CertPool, usage x509.ExtKeyUsage, t time.Time, role string) (*x509.Certificate, error) {
	if len(cs.PeerCertificates) == 0 {
		return nil, fmt.Errorf("the %s presented no certificate", role)
	}
	leaf := cs.PeerCertificates[0]
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err == nil {
		return leaf, nil
	}
	name := certName(leaf)
	var unknown x509.UnknownAuthorityError
	if errors.As(err, &unknown) {
		return nil, fmt.Errorf("%s certificate %s is not signed by this skillbox CA (its issuer is %q): it was made by another CA, or the CA was replaced since: %w", role, name, leaf.Issuer.String(), err)
	}
	var invalid x509.CertificateInvalidError
	if errors.As(err, &invalid) {
		switch invalid.Reason {
		case x509.Expired:
			return nil, fmt.Errorf("%s certificate %s is valid from %s to %s, and it is %s: it has expired (or a clock is wrong) and needs renewing: %w",
				role, name, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339), err)
		case x509.IncompatibleUsage:
			return nil, fmt.Errorf("%s certificate %s is not valid for %s; a %s must present a certificate made for it: %w", role, name, usageName(usage), role, err)
		case x509.CANotAuthorizedForThisName:
			return nil, fmt.Errorf("%s certificate %s carries a name the skillbox CA may not sign: %w", role, name, err)
		}
	}
	return nil, fmt.Errorf("%s certificate %s: %w", role, name, err)
}

// podIdentityOf reads the one name a pod certificate carries.
func podIdentityOf(c *x509.Certificate) (PodIdentity, error) {
	s, err := onlyURI(c, "pod")
	if err != nil {
		return PodIdentity{}, err
	}
	id, err := ParsePodIdentity(s)
	if err != nil {
		return PodIdentity{}, fmt.Errorf("pod certificate: %w", err)
	}
	return id, nil
}

// daemonIdentityOf reads the one name a daemon certificate carries.
func daemonIdentityOf(c *x509.Certificate) (DaemonIdentity, error) {
	s, err := onlyURI(c, "daemon")
	if err != nil {
		return DaemonIdentity{}, err
	}
	id, err := ParseDaemonIdentity(s)
	if err != nil {
		return DaemonIdentity{}, fmt.Errorf("daemon certificate: %w", err)
	}
	return id, nil
}

// onlyURI returns c's URI name, which must be its only name.
func onlyURI(c *x509.Certificate, role string) (string, error) {
	if n := len(c.DNSNames) + len(c.EmailAddresses) + len(c.IPAddresses); n != 0 {
		return "", fmt.Errorf("%s certificate %s carries %d DNS, email or IP names; a skillbox identity carries one URI name only", role, certName(c), n)
	}
	if len(c.URIs) != 1 {
		return "", fmt.Errorf("%s certificate %s carries %d URI names; want exactly one skillbox identity", role, certName(c), len(c.URIs))
	}
	return c.URIs[0].String(), nil
}

// certName is how an error names a certificate: by its identity if it has
// one, else by its subject.
func certName(c *x509.Certificate) string {
	if len(c.URIs) == 1 {
		return c.URIs[0].String()
	}
	return fmt.Sprintf("%q", c.Subject.String())
}

func usageName(u x509.ExtKeyUsage) string {
	switch u {
	case x509.ExtKeyUsageServerAuth:
		return "server auth (only a pod certificate from SignPod is)"
	case x509.ExtKeyUsageClientAuth:
		return "client auth (only a daemon certificate from IssueDaemon is)"
	}
	return fmt.Sprintf("usage %d", u)
}
