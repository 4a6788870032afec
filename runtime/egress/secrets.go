package egress

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Secrets stay outside the sandbox: the sandbox's environment holds a
// placeholder under the secret's name, and the proxy adds the real value
// as a header to HTTPS requests to the secret's hosts. To see those
// requests it terminates the sandbox's TLS to those hosts (and only
// those) with a certificate of a CA of the daemon's own, which the sandbox
// trusts through a bundle file (CABundlePath) and the usual variables; the
// CA's key never leaves skillbox's memory. Plain-HTTP requests never get a
// secret.

// Secret is one credential the proxy adds for a run.
type Secret struct {
	Name  string   // also the environment variable holding the placeholder
	Value string   `json:"-"` // never written anywhere
	Hosts []string // exact host names (lower case) the secret is sent to
	// Header is "Header-Name: format" with one %s for the value, e.g.
	// "Authorization: Bearer %s".
	Header string
}

// Placeholder is what the sandbox sees in place of a secret's value.
func Placeholder(name string) string { return "skillbox-secret-placeholder-" + name }

// CABundlePath is where the sandbox finds the CA bundle it trusts when the
// run has secrets: the image's own roots plus the daemon's CA.
const CABundlePath = "/tmp/.skillbox-ca-bundle.pem"

// CheckSecretHeader validates a header template.
func CheckSecretHeader(h string) error {
	name, format, ok := strings.Cut(h, ":")
	if !ok || strings.TrimSpace(name) == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("header %q must be \"Name: value with %%s\"", h)
	}
	if strings.Count(format, "%s") != 1 || strings.Count(format, "%") != 1 {
		return fmt.Errorf("header %q must hold exactly one %%s (and no other %%)", h)
	}
	return nil
}

func (s Secret) apply(h http.Header) {
	name, format, _ := strings.Cut(s.Header, ":")
	h.Set(strings.TrimSpace(name), fmt.Sprintf(strings.TrimSpace(format), s.Value))
}

// secretsFor are the secrets sent to host.
func (c *Config) secretsFor(host string) []Secret {
	var out []Secret
	for _, s := range c.Secrets {
		for _, h := range s.Hosts {
			if h == host {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// CA is the daemon's certificate authority for the hosts secrets go to.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	mu      sync.Mutex
	leaves  map[string]*tls.Certificate
}

// NewCA makes a CA that lives as long as the process.
func NewCA() (*CA, error) {
	key, serial, err := newKeySerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "skillbox egress proxy CA", Organization: []string{"skillbox"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}, nil
}

// newKeySerial makes a certificate's key and random serial number.
func newKeySerial() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	return key, serial, nil
}

// CertPEM is the CA's certificate (public).
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// leaf returns a certificate for host signed by the CA (cached).
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && time.Now().Before(c.Leaf.NotAfter.Add(-time.Hour)) {
		return c, nil
	}
	key, serial, err := newKeySerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
	ca.leaves[host] = c
	return c, nil
}

// intercept serves a CONNECT to a host that secrets go to: TLS with the
// sandbox on one side (the CA's certificate for the host), TLS with the
// real host on the other (verified against UpstreamRoots or the system's
// roots), and each request in between gets the secrets' headers. Only
// requests for the CONNECTed host are forwarded (a shared front end would
// otherwise hand the secret to another site), and every response is
// redacted (redact.go). Heads are read under MaxHeadBytes and
// HeadTimeout; bodies stream.
func (p *Proxy) intercept(w http.ResponseWriter, up *countedConn, a *Attempt, host string, secrets []Secret) {
	defer up.Close()
	raw, br, release := p.establish(w, a)
	if raw == nil {
		return
	}
	defer release()
	cert, err := p.cfg.CA.leaf(host)
	if err != nil {
		a.Error = "certificate for " + host + ": " + err.Error()
		return
	}
	client := tls.Server(&prefixConn{Conn: raw, r: br}, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	defer client.Close()
	_ = raw.SetReadDeadline(time.Now().Add(p.cfg.HeadTimeout))
	if err := client.Handshake(); err != nil {
		a.Error = "TLS with the sandbox: " + err.Error()
		return
	}
	server := tls.Client(up, &tls.Config{ServerName: host, RootCAs: p.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	defer server.Close()
	if err := server.Handshake(); err != nil {
		a.Error = "TLS with " + host + ": " + err.Error()
		return
	}
	for _, s := range secrets {
		a.Secrets = append(a.Secrets, s.Name)
	}
	red := NewRedactor(secrets)
	chl, shl := &headLimit{r: client}, &headLimit{r: server}
	cr, sr := bufio.NewReader(chl), bufio.NewReader(shl)
	for {
		_ = raw.SetReadDeadline(time.Now().Add(p.cfg.HeadTimeout))
		chl.limit(int64(p.cfg.MaxHeadBytes))
		req, err := http.ReadRequest(cr)
		chl.unlimit()
		_ = raw.SetReadDeadline(time.Time{})
		if err != nil {
			var ne net.Error
			switch {
			case chl.hit:
				a.Error = fmt.Sprintf("request head over %d bytes: connection closed", p.cfg.MaxHeadBytes)
				writeStatus(client, http.StatusRequestHeaderFieldsTooLarge, a.Error)
			case errors.As(err, &ne) && ne.Timeout():
				a.Error = fmt.Sprintf("no complete request head within %s: connection closed", p.cfg.HeadTimeout)
			case err != io.EOF:
				a.Error = "malformed request: " + truncate(err.Error(), 200)
				writeStatus(client, http.StatusBadRequest, a.Error)
			}
			return
		}
		if h, ok := sameHost(req.Host, host, a.Port); !ok {
			m := Attempt{Kind: "host_mismatch", Host: host, Address: a.Address, Port: a.Port, Rule: "none",
				Reason: fmt.Sprintf("a request for Host %q inside the tunnel to %s:%d (which carries secrets) is refused: only requests for %s are forwarded",
					truncate(req.Host, 200), host, a.Port, host)}
			p.reporter(&m, time.Now())()
			writeStatus(client, http.StatusMisdirectedRequest, m.Reason)
			return
		} else {
			req.Host = h
		}
		for _, s := range secrets {
			s.apply(req.Header)
		}
		// The redactor reads gzip and deflate only; a part of a body
		// (Range) could cut a secret in pieces it would not know.
		req.Header.Set("Accept-Encoding", "gzip")
		req.Header.Del("Range")
		req.Header.Del("If-Range")
		if err := req.Write(server); err != nil {
			a.Error = err.Error()
			return
		}
		shl.limit(maxResponseHeadBytes)
		resp, err := http.ReadResponse(sr, req)
		shl.unlimit()
		if err != nil {
			a.Error = "response of " + host + ": " + err.Error()
			writeStatus(client, http.StatusBadGateway, a.Error)
			return
		}
		if err := redactResponse(red, req, resp); err != nil {
			resp.Body.Close()
			a.Error = err.Error()
			writeStatus(client, http.StatusBadGateway, a.Error)
			return
		}
		err = resp.Write(client)
		resp.Body.Close()
		if err != nil || req.Close || resp.Close {
			return
		}
	}
}

// sameHost reports whether a request's Host names the CONNECTed host (on
// its port, or none), and returns the host to send.
func sameHost(reqHost, host string, port uint16) (string, bool) {
	if reqHost == "" {
		return host, true // HTTP/1.0 without Host: the tunnel's
	}
	h, p, err := net.SplitHostPort(reqHost)
	if err != nil {
		h, p = reqHost, ""
	}
	n, ok := normalizeName(h)
	if !ok || n != host {
		return "", false
	}
	if p != "" && p != strconv.Itoa(int(port)) {
		return "", false
	}
	return reqHost, true
}

// redactResponse makes resp safe to pass to the sandbox: the secrets'
// values are replaced in its status, headers and body. A body is decoded
// (its content coding dropped) and sent chunked, since redaction changes
// its length; trailers are dropped.
func redactResponse(red *Redactor, req *http.Request, resp *http.Response) error {
	resp.Status = red.String(resp.Status)
	red.Header(resp.Header)
	resp.Trailer = nil
	if req.Method == http.MethodHead || resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return nil
	}
	coding := resp.Header.Get("Content-Encoding")
	if len(resp.Header.Values("Content-Encoding")) > 1 || strings.Contains(coding, ",") {
		return fmt.Errorf("response of %s has stacked content codings %q, which the proxy cannot redact secrets from", req.Host, resp.Header.Values("Content-Encoding"))
	}
	body, ok, err := decodeBody(coding, resp.Body)
	if !ok {
		return fmt.Errorf("response of %s has content coding %q, which the proxy cannot redact secrets from", req.Host, coding)
	}
	if err == io.EOF {
		body, err = strings.NewReader(""), nil
	}
	if err != nil {
		return fmt.Errorf("response of %s: %s body: %w", req.Host, coding, err)
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = false
	if resp.ProtoAtLeast(1, 1) {
		resp.TransferEncoding = []string{"chunked"}
	} else {
		resp.TransferEncoding, resp.Close = nil, true
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{red.Reader(body), resp.Body}
	return nil
}

// prefixConn reads what the HTTP server had buffered first.
type prefixConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }
