package agentauth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Lifetimes. A leaf is short so that a stolen pod or daemon key opens little
// for long; the CA outlives many leaves, and rotating it means new
// certificates for every pod and replica.
const (
	DefaultCALifetime   = 365 * 24 * time.Hour
	DefaultLeafLifetime = 12 * time.Hour
	MaxLeafLifetime     = 7 * 24 * time.Hour

	// clockSkew backdates a certificate's start so that a pod whose clock is
	// a little behind the daemon's accepts it at once.
	clockSkew = time.Minute
)

// The files of a CA directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// maxPEMFile bounds what LoadCADir reads of a file: a CA certificate and key
// are a few hundred bytes, so anything larger is not one.
const maxPEMFile = 64 << 10

// CA is the daemon's certificate authority for agent identities. Its
// certificate may sign only pod and daemon identities (URI names under
// skillbox://pod and skillbox://daemon; no DNS name, email address or IP
// address), only leaves (path length 0), and only for TLS server and client
// auth.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	now     func() time.Time // time.Now; tests move it
}

// NewCA makes a CA with a fresh ECDSA P-256 key, valid for lifetime from now
// (DefaultCALifetime if lifetime is 0).
func NewCA(lifetime time.Duration) (*CA, error) {
	if lifetime == 0 {
		lifetime = DefaultCALifetime
	}
	if lifetime < 0 {
		return nil, fmt.Errorf("new CA: lifetime %v is negative", lifetime)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("new CA: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "skillbox agent CA"},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(lifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},

		// Names: the two identity kinds and nothing else. "invalid" is a
		// top-level domain reserved never to exist (RFC 6761), so permitting
		// only it permits no real DNS name or mail domain.
		PermittedDNSDomainsCritical: true,
		PermittedURIDomains:         []string{"pod", "daemon"},
		PermittedDNSDomains:         []string{"invalid"},
		PermittedEmailAddresses:     []string{"invalid"},
		ExcludedIPRanges: []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("new CA: sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("new CA: parse own certificate: %w", err)
	}
	return &CA{cert: cert, certPEM: pemBlock("CERTIFICATE", der), key: key, now: time.Now}, nil
}

// LoadCA loads a CA from its PEM certificate and PEM private key (PKCS #8,
// or SEC 1 for EC keys), as a replicated daemon reads them from a Kubernetes
// Secret. It refuses a certificate that is not a CA, a key that is not the
// certificate's, and a CA that is expired or not yet valid.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	der, err := decodeOne(certPEM, "CERTIFICATE")
	if err != nil {
		return nil, fmt.Errorf("load CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("load CA certificate: %w", err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("load CA certificate: %q is not a CA certificate (basic constraints CA and key usage certSign are required)", cert.Subject.String())
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA key: %w", err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("load CA: the private key is not the CA certificate's key; the certificate and key files come from different CAs")
	}
	ca := &CA{cert: cert, certPEM: pemBlock("CERTIFICATE", der), key: key, now: time.Now}
	if err := ca.checkValid(); err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	return ca, nil
}

// LoadCADir loads the CA that Save wrote to dir. It refuses a key file that
// group or others may read or write.
func LoadCADir(dir string) (*CA, error) {
	keyPEM, err := readPrivate(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	certPEM, err := readBounded(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return ca, nil
}

// LoadOrCreateCADir loads the CA in dir, or makes one (valid for lifetime,
// as NewCA) and saves it there if dir holds neither file. Of two processes
// racing to create it, both end up with the one saved first.
func LoadOrCreateCADir(dir string, lifetime time.Duration) (*CA, error) {
	ca, err := LoadCADir(dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return ca, err
	}
	ca, err = NewCA(lifetime)
	if err != nil {
		return nil, err
	}
	if err := ca.Save(dir); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadCADir(dir)
		}
		return nil, err
	}
	return ca, nil
}

// Save writes the CA to dir as ca.crt and ca.key (mode 0600), creating dir
// with mode 0700. Each file appears whole or not at all, and Save never
// replaces an existing CA: replacing it would orphan every certificate it
// signed, so an operator who means to rotate removes the files first. The
// error wraps fs.ErrExist if either file is already there.
func (ca *CA) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("save CA: directory %s is mode %04o; want 0700, so that no other user can list or replace the CA files", dir, st.Mode().Perm())
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return fmt.Errorf("save CA: encode key: %w", err)
	}
	keyPath, certPath := filepath.Join(dir, CAKeyFile), filepath.Join(dir, CACertFile)
	for _, p := range []string{keyPath, certPath} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("save CA: %s already exists; remove both %s and %s to replace the CA: %w", p, CAKeyFile, CACertFile, fs.ErrExist)
		}
	}
	if err := createFile(keyPath, pemBlock("PRIVATE KEY", keyDER)); err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	if err := createFile(certPath, ca.certPEM); err != nil {
		// The key just made is ours; without its certificate it is useless.
		os.Remove(keyPath)
		return fmt.Errorf("save CA: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	return nil
}

// MarshalPEM returns the CA's certificate and private key (PKCS #8) in PEM,
// as LoadCA reads them: the contents of a Kubernetes Secret.
func (ca *CA) MarshalPEM() (certPEM, keyPEM []byte, err error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode CA key: %w", err)
	}
	return bytes.Clone(ca.certPEM), pemBlock("PRIVATE KEY", keyDER), nil
}

// CertPEM returns the CA certificate in PEM: what an agent needs, with
// PoolFromPEM, to verify the daemon.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// Certificate returns the CA certificate. The caller must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Pool returns a pool holding only the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// PoolFromPEM returns a pool of the CA certificates in caCertPEM (one or
// more, as during a rotation). It refuses an empty input, a block that is not
// a certificate, and a certificate that is not a CA.
func PoolFromPEM(caCertPEM []byte) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	rest, n := caCertPEM, 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("CA bundle: PEM block %d is %q, want CERTIFICATE", n+1, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: certificate %d: %w", n+1, err)
		}
		if !c.BasicConstraintsValid || !c.IsCA {
			return nil, fmt.Errorf("CA bundle: certificate %d (%q) is not a CA certificate", n+1, c.Subject.String())
		}
		p.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("CA bundle: no PEM certificate")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("CA bundle: %d bytes after certificate %d are not PEM", len(rest), n)
	}
	return p, nil
}

// checkValid says whether the CA can sign now.
func (ca *CA) checkValid() error {
	now := ca.now()
	if now.After(ca.cert.NotAfter) {
		return fmt.Errorf("the CA certificate expired at %s; make a new CA, then new certificates for every daemon replica and pod", ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(ca.cert.NotBefore) {
		return fmt.Errorf("the CA certificate is valid from %s only, and it is %s here; check this machine's clock", ca.cert.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// decodeOne decodes b, which must be exactly one PEM block of type typ.
func decodeOne(b []byte, typ string) ([]byte, error) {
	blk, rest := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("no PEM block found (want %s)", typ)
	}
	if blk.Type != typ {
		return nil, fmt.Errorf("PEM block is %q, want %s", blk.Type, typ)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%d bytes after the %s PEM block; want one block only", len(rest), typ)
	}
	return blk.Bytes, nil
}

// parseKeyPEM parses one PEM private key, ECDSA or Ed25519.
func parseKeyPEM(b []byte) (crypto.Signer, error) {
	blk, rest := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block found (want PRIVATE KEY)")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%d bytes after the %s PEM block; want one block only", len(rest), blk.Type)
	}
	var key any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("PEM block is %q, want PRIVATE KEY or EC PRIVATE KEY", blk.Type)
	}
	if err != nil {
		return nil, err
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("key is %T; want ECDSA or Ed25519", key)
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// readPrivate reads the private key file p, refusing one that group or
// others may read or write.
func readPrivate(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("CA key %s is not a regular file", p)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("CA key %s is mode %04o, open to group or others; make it 0600 (chmod 600 %s), or for a Kubernetes Secret volume set defaultMode: 0400", p, perm, p)
	}
	return readAllBounded(f, p)
}

func readBounded(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	defer f.Close()
	return readAllBounded(f, p)
}

func readAllBounded(r io.Reader, p string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxPEMFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(b) > maxPEMFile {
		return nil, fmt.Errorf("%s is larger than %d bytes; it is not a CA certificate or key", p, maxPEMFile)
	}
	return b, nil
}

// createFile writes b to a new file p, mode 0600, whole or not at all: it
// writes and syncs a temporary file beside p, then links it to p, which
// fails if p exists.
func createFile(p string, b []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Link(tmp, p); err != nil {
		return err
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
