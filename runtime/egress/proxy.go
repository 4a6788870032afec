package egress

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Resolver looks names up on the host side; *net.Resolver is one. Tests
// inject their own.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config is one run's egress: what it may reach and how it is reported.
type Config struct {
	// Rules are the allowed destinations (none: every attempt is denied).
	Rules []Rule
	// Resolver resolves names the rules allow; nil is net.DefaultResolver.
	Resolver Resolver
	// Hosts are static names an administrator (or a test) maps to
	// addresses, consulted before Resolver. They are trusted: a private
	// or loopback address here is used as written.
	Hosts map[string][]netip.Addr
	// MaxConnections caps the connections a run may open (allowed ones);
	// MaxBytesOut caps what it may send, over all of them. 0: no cap.
	MaxConnections int
	MaxBytesOut    int64
	// DialTimeout bounds connecting upstream; 0 means 10 seconds.
	DialTimeout time.Duration
	// MaxHeadBytes bounds a request head from the sandbox (0:
	// DefaultMaxHeadBytes); HeadTimeout bounds reading one (0:
	// DefaultHeadTimeout); IdleTimeout closes a connection that carried
	// nothing either way for that long (0: DefaultIdleTimeout);
	// MaxConcurrent caps the connections open to the proxy at once (0:
	// DefaultMaxConcurrent). See limits.go.
	MaxHeadBytes  int
	HeadTimeout   time.Duration
	IdleTimeout   time.Duration
	MaxConcurrent int
	// ReportsPerRun attempts of the run are reported one by one (0:
	// DefaultReportsPerRun), and only while UIDBudget (when set, shared by
	// the runs of one uid) has room; the rest are summed up in "aggregate"
	// attempts (see reports.go).
	ReportsPerRun     int
	UIDBudget         Budget `json:"-"`
	AggregateInterval time.Duration
	// Secrets are added to HTTPS requests to their hosts, which needs CA
	// (see secrets.go); UpstreamRoots verifies those hosts (nil: the
	// system's roots). SystemBundle is the host path of the image's own
	// CA bundle, put in the sandbox's bundle with CA's certificate.
	Secrets       []Secret
	CA            *CA
	UpstreamRoots *x509.CertPool
	SystemBundle  string
	// Report receives every attempt once it is over (a denied one at
	// once). It is called from the connection's goroutine; it may block
	// (an audit write), which holds that connection only.
	Report func(Attempt) `json:"-"`
}

// Attempt is one connection the sandbox tried to make through the proxy,
// or one name it tried to resolve that no rule allows.
type Attempt struct {
	// Kind is "connect" (CONNECT), "http" (plain HTTP), "transparent",
	// "dns", "host_mismatch" (a request inside an intercepted tunnel for
	// another host), "proxy" (a connection the run's cap refused) or
	// "aggregate" (attempts summed up, see Aggregate).
	Kind    string `json:"kind"`
	Host    string `json:"host,omitempty"` // the name asked for; empty for a raw address
	Address string `json:"address,omitempty"`
	Port    uint16 `json:"port,omitempty"`
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule"` // the destination rule and its source, or why none applied
	Reason  string `json:"reason,omitempty"`
	Limit   string `json:"limit,omitempty"` // LimitConnections or LimitBytesOut when a cap refused or cut it
	Out     int64  `json:"bytes_out"`
	In      int64  `json:"bytes_in"`
	// DurationMS is from the request to the end of the connection.
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
	// Secrets names the secrets added to the connection's requests (never
	// their values).
	Secrets []string `json:"secrets,omitempty"`
	// An "aggregate" attempt sums up Count attempts that were not
	// reported one by one (Out and In are their totals): by kind,
	// destination and outcome in Aggregate, the rest counted in Unlisted.
	Count     int            `json:"count,omitempty"`
	Aggregate []AttemptCount `json:"aggregate,omitempty"`
	Unlisted  int            `json:"unlisted,omitempty"`
}

// Caps a run can hit.
const (
	LimitConnections = "egress_connections"
	LimitBytesOut    = "egress_bytes_out"
)

// Stats sum up a run's egress.
type Stats struct {
	Connections int    `json:"connections"` // allowed connections
	Denied      int    `json:"denied"`      // refused attempts (connections and names)
	BytesOut    int64  `json:"bytes_out"`
	BytesIn     int64  `json:"bytes_in"`
	LimitHit    string `json:"limit_hit,omitempty"` // the first cap the run hit
}

// Proxy is the HTTP proxy of one run.
type Proxy struct {
	cfg      Config
	srv      *http.Server
	over     chan struct{}
	overOnce sync.Once

	mu       sync.Mutex
	stats    Stats
	conns    int
	bytesOut atomic.Int64
	active   sync.WaitGroup
	closed   bool
	clients  map[*clientConn]struct{}
	stopReap chan struct{}
	reports  *reportGate
}

// clientKey holds the *clientConn of a request of the plain proxy.
type clientKey struct{}

// NewProxy makes a proxy for cfg; Serve it on a listener.
func NewProxy(cfg Config) *Proxy {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.MaxHeadBytes <= 0 {
		cfg.MaxHeadBytes = DefaultMaxHeadBytes
	}
	if cfg.HeadTimeout <= 0 {
		cfg.HeadTimeout = DefaultHeadTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	p := &Proxy{cfg: cfg, over: make(chan struct{}), clients: map[*clientConn]struct{}{}, stopReap: make(chan struct{})}
	p.reports = newReportGate(cfg)
	p.srv = &http.Server{
		Handler: p,
		// net/http allows 4 KiB over MaxHeaderBytes; it answers a head
		// over it with 431 and closes (connState reports it).
		MaxHeaderBytes:    cfg.MaxHeadBytes,
		ReadHeaderTimeout: cfg.HeadTimeout,
		IdleTimeout:       cfg.HeadTimeout,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, clientKey{}, c)
		},
		ConnState: p.connState,
	}
	go p.reap()
	return p
}

// connState reports a connection of the plain proxy that ends while a
// request head was read but never handled: net/http refused the head (too
// large: 431; malformed: 400) or timed it out.
func (p *Proxy) connState(c net.Conn, s http.ConnState) {
	cc, ok := c.(*clientConn)
	if !ok {
		return
	}
	switch s {
	case http.StateNew, http.StateIdle:
		cc.mark, cc.active = cc.read.Load(), false
		cc.handled.Store(false)
	case http.StateActive:
		cc.active = true
	case http.StateClosed:
		n := cc.read.Load() - cc.mark
		if cc.handled.Load() || n == 0 {
			return
		}
		a := Attempt{Kind: "http", Port: ProxyPort, Rule: "none"}
		switch {
		case n > int64(p.cfg.MaxHeadBytes):
			a.Reason = fmt.Sprintf("request head over %d bytes refused (431) and the connection closed", p.cfg.MaxHeadBytes)
		case !cc.active:
			a.Reason = fmt.Sprintf("no complete request head within %s: connection closed", p.cfg.HeadTimeout)
		default:
			a.Reason = "malformed request head refused (400) and the connection closed"
		}
		a.Out = n
		p.reporter(&a, time.Now())()
	}
}

// Serve accepts proxy connections on l until Shutdown.
func (p *Proxy) Serve(l net.Listener) error {
	err := p.srv.Serve(p.listen(l, "proxy", ProxyPort))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Over is closed when the run hits a cap.
func (p *Proxy) Over() <-chan struct{} { return p.over }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.BytesOut = p.bytesOut.Load()
	return s
}

// Shutdown stops accepting, cuts the tunnels still open and waits until
// every attempt has been reported.
func (p *Proxy) Shutdown() Stats {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	_ = p.srv.Close()
	p.mu.Lock()
	if !p.closed {
		close(p.stopReap)
	}
	p.closed = true
	var open []*clientConn
	for c := range p.clients {
		open = append(open, c)
	}
	p.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
	p.active.Wait()
	p.reports.flushAll()
	return p.Stats()
}

func (p *Proxy) hitLimit(limit string) {
	p.mu.Lock()
	if p.stats.LimitHit == "" {
		p.stats.LimitHit = limit
	}
	p.mu.Unlock()
	p.overOnce.Do(func() { close(p.over) })
}

// noteDNS counts a refused name (the resolver's).
func (p *Proxy) noteDenied() {
	p.mu.Lock()
	p.stats.Denied++
	p.mu.Unlock()
}

// ServeHTTP handles CONNECT tunnels and absolute-form plain HTTP requests.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.active.Add(1)
	defer p.active.Done()
	start := time.Now()
	a := Attempt{Kind: "http"}
	if client, ok := r.Context().Value(clientKey{}).(*clientConn); ok {
		client.handled.Store(true)
	}
	hostport := r.Host
	if r.Method == http.MethodConnect {
		a.Kind = "connect"
	} else {
		if r.URL == nil || !r.URL.IsAbs() || r.URL.Host == "" {
			http.Error(w, "skillbox egress proxy: send requests through the proxy in absolute form (set HTTP_PROXY / HTTPS_PROXY)", http.StatusBadRequest)
			return
		}
		if r.URL.Scheme != "http" {
			http.Error(w, "skillbox egress proxy: only http:// URLs are forwarded as plain requests; use CONNECT (HTTPS_PROXY) for "+r.URL.Scheme, http.StatusBadRequest)
			return
		}
		hostport = r.URL.Host
		if r.URL.Port() == "" {
			hostport = net.JoinHostPort(r.URL.Hostname(), "80")
		}
	}
	report := p.reporter(&a, start)
	host, portStr, err := net.SplitHostPort(hostport)
	port, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || perr != nil || port == 0 {
		a.Host, a.Reason, a.Rule = truncate(hostport, 300), "malformed destination", "none"
		report()
		http.Error(w, "skillbox egress proxy: malformed destination "+strconv.Quote(truncate(hostport, 300)), http.StatusBadRequest)
		return
	}
	a.Port = uint16(port)
	client, _ := r.Context().Value(clientKey{}).(*clientConn)
	cc, status, why := p.connect(r.Context(), host, &a, report)
	if cc == nil {
		http.Error(w, "skillbox egress proxy: "+why, status)
		return
	}
	cc.serve(client)
	defer p.finish(cc, &a, report)
	if r.Method == http.MethodConnect {
		if secrets := p.cfg.secretsFor(a.Host); len(secrets) > 0 && p.cfg.CA != nil {
			p.intercept(w, cc, &a, a.Host, secrets)
			return
		}
		p.tunnel(w, cc, &a)
		return
	}
	p.forward(w, r, cc, &a)
}

// reporter returns the function that reports a (once it is complete),
// timed from start.
func (p *Proxy) reporter(a *Attempt, start time.Time) func() {
	return func() {
		a.DurationMS = time.Since(start).Milliseconds()
		if !a.Allowed {
			p.noteDenied()
		}
		p.reports.send(*a)
	}
}

// connect authorizes host on a's port, counts the connection against the
// cap and dials it. A refusal (nil conn) is reported already and comes
// with the HTTP status and message to answer; otherwise finish reports
// the attempt once the connection is over.
func (p *Proxy) connect(ctx context.Context, host string, a *Attempt, report func()) (*countedConn, int, string) {
	addrs, rule, denial := p.authorize(ctx, host, a.Port, a)
	if denial != "" {
		a.Reason = denial
		report()
		return nil, http.StatusForbidden, denial
	}
	if !p.takeConnection() {
		a.Rule, a.Reason, a.Limit = rule, fmt.Sprintf("the run's connection cap (%d) is reached", p.cfg.MaxConnections), LimitConnections
		report()
		return nil, http.StatusForbidden, a.Reason
	}
	a.Allowed, a.Rule = true, rule
	up, err := p.dial(ctx, addrs, a.Port, a)
	if err != nil {
		a.Error = err.Error()
		report()
		return nil, http.StatusBadGateway, a.Error
	}
	return &countedConn{Conn: up, p: p}, 0, ""
}

// finish closes an upstream connection and reports its attempt with the
// bytes it carried.
func (p *Proxy) finish(cc *countedConn, a *Attempt, report func()) {
	cc.Close()
	a.Out, a.In = cc.out.Load(), cc.in.Load()
	p.mu.Lock()
	p.stats.BytesIn += a.In
	p.mu.Unlock()
	if cc.cut.Load() {
		a.Limit = LimitBytesOut
	}
	report()
}

// pipe copies both ways between a client (read through from, which may
// hold bytes it already buffered) and upstream until both sides are done.
func pipe(client net.Conn, from io.Reader, up *countedConn) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(up, from)
		closeWrite(up.Conn)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, up)
		closeWrite(client)
		done <- struct{}{}
	}()
	<-done
	<-done
}

// authorize decides host:port: the addresses to dial and the rule, or why
// not. It fills a's host and address fields.
func (p *Proxy) authorize(ctx context.Context, host string, port uint16, a *Attempt) ([]netip.Addr, string, string) {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ip = ip.Unmap()
		a.Address = ip.String()
		for _, r := range p.cfg.Rules {
			if r.MatchAddr(ip, port) {
				return []netip.Addr{ip}, ruleName(r), ""
			}
		}
		a.Rule = "none"
		return nil, "", fmt.Sprintf("%s port %d is not in the run's egress rules (raw addresses need an address rule)", ip, port)
	}
	name, ok := normalizeName(host)
	if !ok {
		a.Host, a.Rule = truncate(host, 300), "none"
		return nil, "", fmt.Sprintf("%q is not a valid host name", truncate(host, 100))
	}
	a.Host = name
	var match *Rule
	for i, r := range p.cfg.Rules {
		if r.MatchName(name, port) {
			match = &p.cfg.Rules[i]
			break
		}
	}
	if match == nil {
		a.Rule = "none"
		if NameAllowed(p.cfg.Rules, name) {
			return nil, "", fmt.Sprintf("%s is allowed, but not on port %d", name, port)
		}
		return nil, "", fmt.Sprintf("%s:%d is not in the run's egress rules", name, port)
	}
	rule := ruleName(*match)
	a.Rule = rule
	if static, ok := p.cfg.Hosts[name]; ok {
		if len(static) > 0 {
			a.Address = static[0].String()
		}
		return static, rule, ""
	}
	lctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	addrs, err := p.cfg.Resolver.LookupNetIP(lctx, "ip", name)
	if err != nil || len(addrs) == 0 {
		return nil, rule, fmt.Sprintf("%s does not resolve: %v", name, err)
	}
	var ok2, refused []netip.Addr
	for _, ip := range addrs {
		ip = ip.Unmap()
		if publicAddr(ip) || p.addrRuleCovers(ip, port) {
			ok2 = append(ok2, ip)
		} else {
			refused = append(refused, ip)
		}
	}
	if len(ok2) == 0 {
		a.Address = refused[0].String()
		return nil, rule, fmt.Sprintf("%s resolves only to non-public addresses (%v); an address rule must name them to allow it", name, refused)
	}
	a.Address = ok2[0].String()
	return ok2, rule, ""
}

func (p *Proxy) addrRuleCovers(ip netip.Addr, port uint16) bool {
	for _, r := range p.cfg.Rules {
		if r.MatchAddr(ip, port) {
			return true
		}
	}
	return false
}

func ruleName(r Rule) string {
	if r.Source == "" {
		return r.String()
	}
	return r.String() + " from " + r.Source
}

// takeConnection counts one allowed connection against the cap.
func (p *Proxy) takeConnection() bool {
	p.mu.Lock()
	if p.cfg.MaxConnections > 0 && p.conns >= p.cfg.MaxConnections {
		p.mu.Unlock()
		p.hitLimit(LimitConnections)
		return false
	}
	p.conns++
	p.stats.Connections++
	p.mu.Unlock()
	return true
}

func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port uint16, a *Attempt) (net.Conn, error) {
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	var last error
	for _, ip := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(ip, port).String())
		if err == nil {
			a.Address = ip.String()
			return c, nil
		}
		last = err
	}
	if last == nil {
		last = errors.New("no address to connect to")
	}
	return nil, fmt.Errorf("connect to %s port %d: %v", a.Host+a.Address, port, last)
}

// establish takes over a CONNECT's client connection (a *clientConn:
// Shutdown and the reaper cut it) and tells it the tunnel is up; release
// closes it. Nil means it is already given up.
func (p *Proxy) establish(w http.ResponseWriter, a *Attempt) (net.Conn, *bufio.Reader, func()) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "skillbox egress proxy: cannot tunnel", http.StatusInternalServerError)
		return nil, nil, nil
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		a.Error = err.Error()
		return nil, nil, nil
	}
	release := func() { client.Close() }
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		a.Error = err.Error()
		release()
		return nil, nil, nil
	}
	return client, buf.Reader, release
}

func (p *Proxy) tunnel(w http.ResponseWriter, up *countedConn, a *Attempt) {
	defer up.Close()
	client, br, release := p.establish(w, a)
	if client == nil {
		return
	}
	defer release()
	// br first hands over what the client sent after its CONNECT.
	pipe(client, br, up)
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
}

// hopHeaders are not forwarded (RFC 9110 7.6.1, plus the proxy's own).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, up *countedConn, a *Attempt) {
	defer up.Close()
	tr := &http.Transport{
		DialContext:            func(context.Context, string, string) (net.Conn, error) { return up, nil },
		DisableKeepAlives:      true,
		DisableCompression:     true,
		Proxy:                  nil,
		MaxResponseHeaderBytes: maxResponseHeadBytes,
	}
	defer tr.CloseIdleConnections()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	// The Host header is the checked destination's, whatever the client
	// wrote (no reaching another site that shares the address).
	out.Host = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		a.Error = err.Error()
		http.Error(w, "skillbox egress proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// countedConn counts an upstream connection's bytes and enforces the
// run's cap on bytes out.
type countedConn struct {
	net.Conn
	p       *Proxy
	out, in atomic.Int64
	cut     atomic.Bool
	client  *clientConn // its traffic keeps the client's connection from idling
}

// serve ties c to the sandbox's connection it serves: closed with it, and
// its traffic counts as the client's (a slow upstream is not idle).
func (c *countedConn) serve(client *clientConn) {
	if client == nil {
		return
	}
	c.client = client
	client.attach(c)
}

func (c *countedConn) Write(b []byte) (int, error) {
	if max := c.p.cfg.MaxBytesOut; max > 0 {
		if c.p.bytesOut.Add(int64(len(b))) > max {
			c.p.bytesOut.Add(-int64(len(b)))
			c.cut.Store(true)
			c.p.hitLimit(LimitBytesOut)
			c.Conn.Close()
			return 0, fmt.Errorf("the run's cap on bytes sent (%d) is reached", max)
		}
	} else {
		c.p.bytesOut.Add(int64(len(b)))
	}
	// Counted before the write, so a reader that has seen the answer to
	// these bytes sees them counted (the transport writes from a goroutine
	// of its own); what was not written is taken back.
	c.out.Add(int64(len(b)))
	if c.client != nil {
		c.client.touch()
	}
	n, err := c.Conn.Write(b)
	if n < len(b) {
		c.out.Add(-int64(len(b) - n))
		c.p.bytesOut.Add(-int64(len(b) - n))
	}
	return n, err
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	if n > 0 && c.client != nil {
		c.client.touch()
	}
	return n, err
}

// nonPublic are ranges a name must not resolve into unless a rule names
// them: besides what netip classifies (loopback, private, link-local,
// multicast, unspecified), shared address space, benchmarking, reserved
// and the IPv6 translation and documentation ranges.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("100::/64"),
}

// publicAddr reports whether ip is a globally routed unicast address.
func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsGlobalUnicast() || ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
