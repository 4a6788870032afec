package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// The transparent path is for clients that ignore the proxy variables
// (Node's fetch, raw sockets): the sandbox's resolver answers an allowed
// name with the proxy's address, so such a client connects there on the
// destination's port. The proxy listens on every port the name rules
// name, takes the destination's name from the TLS ClientHello (SNI) or
// the HTTP Host header, and applies the same checks, caps and reports as
// for CONNECT. TLS passes through untouched (secrets need the proxy
// variables); plain HTTP carries one request per connection.

// transparentPorts are the ports the name rules name, but the proxy's own.
func transparentPorts(rules []Rule) []uint16 {
	seen := map[uint16]bool{ProxyPort: true, 53: true}
	var out []uint16
	for _, r := range rules {
		if r.Host != "" && !seen[r.Port] {
			seen[r.Port] = true
			out = append(out, r.Port)
		}
	}
	return out
}

// serveTransparent accepts connections made straight to the proxy's
// address on port until l is closed.
func (p *Proxy) serveTransparent(l net.Listener, port uint16) {
	l = p.listen(l, "transparent", port)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		p.active.Add(1)
		go func() {
			defer p.active.Done()
			defer c.Close()
			p.transparent(c.(*clientConn), port)
		}()
	}
}

// errSNI stops the TLS handshake once the ClientHello is read.
var errSNI = errors.New("client hello read")

func (p *Proxy) transparent(c *clientConn, port uint16) {
	start := time.Now()
	a := Attempt{Kind: "transparent", Port: port}
	report := p.reporter(&a, start)
	_ = c.SetReadDeadline(time.Now().Add(p.cfg.HeadTimeout))
	// The head (a ClientHello fits in the buffer; an HTTP head in
	// MaxHeadBytes) is read under a limit; the rest streams.
	hl := &headLimit{r: c}
	hl.limit(int64(p.cfg.MaxHeadBytes))
	br := bufio.NewReaderSize(hl, 16<<10+5)
	first, err := br.Peek(1)
	if err != nil {
		return // connected and said nothing
	}
	var host string
	var req *http.Request
	if first[0] == 0x16 { // a TLS handshake record
		host, err = peekSNI(br)
	} else {
		req, err = http.ReadRequest(br)
		if err == nil {
			host = req.Host
			if h, _, serr := net.SplitHostPort(host); serr == nil {
				host = h
			}
		}
	}
	hl.unlimit()
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || host == "" {
		a.Rule, a.Reason = "none", "no destination name (TLS without SNI, or not HTTP): set HTTPS_PROXY / HTTP_PROXY to use the proxy"
		var ne net.Error
		switch {
		case hl.hit:
			a.Reason = fmt.Sprintf("request head over %d bytes: connection closed", p.cfg.MaxHeadBytes)
			if req == nil && first[0] != 0x16 {
				writeStatus(c, http.StatusRequestHeaderFieldsTooLarge, a.Reason)
			}
		case errors.As(err, &ne) && ne.Timeout():
			a.Reason = fmt.Sprintf("no complete request head or TLS client hello within %s: connection closed", p.cfg.HeadTimeout)
		}
		a.Out = c.read.Load()
		report()
		return
	}
	refuse := func(why string) {
		if req != nil {
			writeStatus(c, http.StatusForbidden, why)
		}
	}
	cc, status, why := p.connect(context.Background(), host, &a, report)
	if cc == nil {
		if status == http.StatusForbidden {
			refuse(why)
		}
		return
	}
	cc.serve(c)
	defer p.finish(cc, &a, report)
	if req != nil {
		// One request per connection: a second one could name another
		// host on the same connection.
		for _, h := range hopHeaders {
			req.Header.Del(h)
		}
		req.Close = true
		if err := req.Write(cc); err != nil {
			a.Error = err.Error()
			return
		}
		_, _ = io.Copy(c, cc)
		return
	}
	pipe(c, br, cc) // the buffered ClientHello first, then the rest
}

// writeStatus answers a plain-HTTP client with code and why, and closes.
func writeStatus(w io.Writer, code int, why string) {
	resp := &http.Response{StatusCode: code, ProtoMajor: 1, ProtoMinor: 1, Close: true,
		Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(bytes.NewBufferString("skillbox egress proxy: " + why + "\n"))}
	_ = resp.Write(w)
}

// peekSNI reads the server name of the ClientHello at the head of br
// without consuming it.
func peekSNI(br *bufio.Reader) (string, error) {
	hdr, err := br.Peek(5)
	if err != nil {
		return "", err
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	rec, err := br.Peek(5 + n)
	if err != nil {
		return "", err
	}
	var name string
	err = tls.Server(&helloConn{r: bytes.NewReader(rec)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name = h.ServerName
			return nil, errSNI
		},
	}).Handshake()
	if name == "" {
		return "", fmt.Errorf("no server name in the TLS client hello: %v", err)
	}
	return name, nil
}

// helloConn feeds a recorded ClientHello to a TLS server and drops what
// it writes.
type helloConn struct {
	net.Conn
	r io.Reader
}

func (c *helloConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *helloConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
