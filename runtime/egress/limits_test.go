package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/egress/egresstest"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

func TestHeadLimit(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		limit   int64
		read    int
		wantErr bool
	}{
		{"under", "hello", 10, 5, false},
		{"exact", "helloworld", 10, 10, true}, // EOF lies past the limit
		{"over", "hello world, and more", 10, 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &headLimit{r: strings.NewReader(tt.in)}
			h.limit(tt.limit)
			b, err := io.ReadAll(h)
			if len(b) != tt.read || (err != nil) != tt.wantErr || h.hit != tt.wantErr {
				t.Fatalf("read %d (%v, hit %v); want %d, error %v", len(b), err, h.hit, tt.read, tt.wantErr)
			}
			h.unlimit()
			rest, err := io.ReadAll(h)
			if err != nil || len(b)+len(rest) != len(tt.in) {
				t.Fatalf("after unlimit: %q, %v", rest, err)
			}
		})
	}
}

// lab is a proxy on loopback with a plain upstream (allowed.test), an
// echoing TLS upstream that secrets go to (example.com), the transparent
// path for both, and a client that trusts the proxy's CA.
type lab struct {
	p          *Proxy
	rec        *recorder
	proxyAddr  string
	transPlain string // transparent listener for allowed.test's port
	transTLS   string // transparent listener for example.com's port
	hp, tp     string
	roots      *x509.CertPool
}

func newLab(t *testing.T, tweak func(*Config)) *lab {
	t.Helper()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "plain") }))
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(http.HandlerFunc(egresstest.Echo))
	t.Cleanup(secure.Close)
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	up := x509.NewCertPool()
	up.AddCert(secure.Certificate())
	l := &lab{hp: port(t, plain.URL), tp: port(t, secure.URL), rec: &recorder{}}
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	cfg := Config{
		Rules:         mustRules(t, "allowed.test:"+l.hp, "example.com:"+l.tp),
		Hosts:         map[string][]netip.Addr{"allowed.test": lo, "example.com": lo},
		Secrets:       testSecrets,
		CA:            ca,
		UpstreamRoots: up,
		Report:        l.rec.report,
		HeadTimeout:   5 * time.Second,
	}
	cfg.Secrets = []Secret{{Name: "API_TOKEN", Value: testSecret, Hosts: []string{"example.com"}, Header: "Authorization: Bearer %s"}}
	if tweak != nil {
		tweak(&cfg)
	}
	l.p = NewProxy(cfg)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go l.p.Serve(pl)
	l.proxyAddr = pl.Addr().String()
	for _, x := range []struct {
		addr *string
		port string
	}{{&l.transPlain, l.hp}, {&l.transTLS, l.tp}} {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(x.port)
		go l.p.serveTransparent(tl, uint16(n))
		*x.addr = tl.Addr().String()
		t.Cleanup(func() { tl.Close() })
	}
	t.Cleanup(func() { l.p.Shutdown() })
	l.roots = x509.NewCertPool()
	l.roots.AppendCertsFromPEM(ca.CertPEM())
	return l
}

// tunnel CONNECTs to hostport through the proxy; tlsName, when set, then
// starts TLS trusting the proxy's CA.
func (l *lab) tunnel(t *testing.T, hostport, tlsName string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", hostport, resp, err)
	}
	if tlsName == "" {
		return c
	}
	tc := tls.Client(c, &tls.Config{ServerName: tlsName, RootCAs: l.roots})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}

// waitReport waits for an attempt that match accepts, among those
// reported after the first `after`.
func (l *lab) waitReport(t *testing.T, after int, what string, match func(Attempt) bool) Attempt {
	t.Helper()
	var found Attempt
	if waitfor.Within(15*time.Second, func() bool {
		for _, a := range l.rec.all()[after:] {
			if match(a) {
				found = a
				return true
			}
		}
		return false
	}) {
		return found
	}
	t.Fatalf("no report of %s; reports: %+v", what, l.rec.all())
	return Attempt{}
}

// flood writes an unterminated head (up to 64 MiB) until the proxy
// closes; it returns how many bytes the kernel took.
func flood(c net.Conn, start string) int64 {
	_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
	n, _ := c.Write([]byte(start))
	total := int64(n)
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	for total < 64<<20 {
		n, err := c.Write(chunk)
		total += int64(n)
		if err != nil {
			break
		}
	}
	return total
}

// An unterminated head through each path is cut at the head
// limit, answered or closed, and reported; the proxy read no more than
// the limit (and a buffer).
func TestProxyHeadFlood(t *testing.T) {
	const limit = DefaultMaxHeadBytes
	l := newLab(t, nil)
	over := func(a Attempt) bool {
		return strings.Contains(a.Reason+a.Error, "over "+strconv.Itoa(limit)+" bytes")
	}
	tests := []struct {
		name string
		conn func(t *testing.T) net.Conn
		head string
		kind string
	}{
		{"plain", func(t *testing.T) net.Conn { return dial(t, l.proxyAddr) }, "GET http://allowed.test:" + l.hp + "/ HTTP/1.1\r\nX-Flood: ", "http"},
		{"connect", func(t *testing.T) net.Conn { return dial(t, l.proxyAddr) }, "CONNECT allowed.test:" + l.hp + " HTTP/1.1\r\nX-Flood: ", "http"},
		{"transparent", func(t *testing.T) net.Conn { return dial(t, l.transPlain) }, "GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Flood: ", "transparent"},
		{"intercepted", func(t *testing.T) net.Conn { return l.tunnel(t, "example.com:"+l.tp, "example.com") }, "GET / HTTP/1.1\r\nHost: example.com\r\nX-Flood: ", "connect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(l.rec.all())
			c := tt.conn(t)
			defer c.Close()
			done := make(chan int64, 1)
			go func() { done <- flood(c, tt.head) }()
			a := l.waitReport(t, n, "the oversized head", func(a Attempt) bool { return a.Kind == tt.kind && over(a) })
			c.Close()
			<-done
			if a.Kind != "connect" && (a.Out > limit+16<<10 || a.Allowed) {
				t.Fatalf("report %+v: more than the limit read", a)
			}
		})
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A head that never completes is given up after HeadTimeout,
// on the paths that read heads.
func TestProxyHeadTimeout(t *testing.T) {
	l := newLab(t, func(c *Config) { c.HeadTimeout = 300 * time.Millisecond })
	tests := []struct {
		name string
		conn func(t *testing.T) net.Conn
		kind string
	}{
		{"plain", func(t *testing.T) net.Conn { return dial(t, l.proxyAddr) }, "http"},
		{"transparent", func(t *testing.T) net.Conn { return dial(t, l.transPlain) }, "transparent"},
		{"intercepted", func(t *testing.T) net.Conn { return l.tunnel(t, "example.com:"+l.tp, "example.com") }, "connect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(l.rec.all())
			c := tt.conn(t)
			defer c.Close()
			fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Slow: a")
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.Copy(io.Discard, c) // until the proxy closes
			if err := c.SetReadDeadline(time.Time{}); err != nil {
				t.Fatal(err)
			}
			l.waitReport(t, n, "the head that timed out", func(a Attempt) bool {
				return a.Kind == tt.kind && (strings.Contains(a.Reason+a.Error, "within") || strings.Contains(a.Reason, "malformed"))
			})
		})
	}
}

// Connections open at once are capped per run; one over the
// cap is closed at once and reported; an idle one is closed.
func TestProxyConcurrentAndIdle(t *testing.T) {
	l := newLab(t, func(c *Config) { c.MaxConcurrent = 2; c.IdleTimeout = 500 * time.Millisecond })
	a, b := l.tunnel(t, "allowed.test:"+l.hp, ""), dial(t, l.transPlain)
	defer a.Close()
	defer b.Close()
	waitfor.True(t, "b to be accepted", 5*time.Second, func() bool {
		l.p.mu.Lock()
		defer l.p.mu.Unlock()
		return len(l.p.clients) == 2
	})
	c := dial(t, l.proxyAddr)
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a third connection was served (%d bytes)", n)
	}
	l.waitReport(t, 0, "the refused connection", func(a Attempt) bool { return a.Limit == LimitConcurrent && !a.Allowed })
	// Both others go idle and are closed.
	for _, x := range []net.Conn{a, b} {
		_ = x.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := x.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("an idle connection was not closed: %v", err)
		}
	}
	// Their places are back.
	d := l.tunnel(t, "allowed.test:"+l.hp, "")
	d.Close()
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// An upstream echoing the request's headers (in headers and
// bodies, plain, chunked, gzip or base64) never shows the secret to the
// sandbox; a request for another Host in the tunnel is refused and
// reported.
func TestInterceptRedactsAndChecksHost(t *testing.T) {
	l := newLab(t, nil)
	pu, _ := url.Parse("http://" + l.proxyAddr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: l.roots}}}
	for _, path := range []string{"/", "/chunked", "/gzip", "/base64"} {
		t.Run("echo"+path, func(t *testing.T) {
			resp, err := c.Get("https://example.com:" + l.tp + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var h bytes.Buffer
			resp.Header.Write(&h)
			all := h.String() + string(body)
			if path == "/base64" {
				dec, _ := base64.StdEncoding.DecodeString(string(body))
				all += string(dec)
			}
			if resp.StatusCode != 200 || leaks(all) || strings.Contains(all, testSecret[:10]+testSecret[10:]) {
				t.Fatalf("%d, the secret reached the client:\n%s", resp.StatusCode, all)
			}
			if !strings.Contains(resp.Header.Get("X-Echo-Auth"), Placeholder("API_TOKEN")) {
				t.Fatalf("echoed header %q: want the placeholder", resp.Header.Get("X-Echo-Auth"))
			}
		})
	}
	t.Run("host mismatch", func(t *testing.T) {
		tc := l.tunnel(t, "example.com:"+l.tp, "example.com")
		defer tc.Close()
		fmt.Fprint(tc, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(string(body), testSecret) {
			t.Fatalf("%d %q; want 421", resp.StatusCode, body)
		}
		a := l.waitReport(t, 0, "the mismatched host", func(a Attempt) bool { return a.Kind == "host_mismatch" })
		if a.Allowed || a.Host != "example.com" || !strings.Contains(a.Reason, "evil.test") {
			t.Fatalf("report %+v", a)
		}
	})
	t.Run("same host other spellings", func(t *testing.T) {
		for _, h := range []string{"EXAMPLE.com", "example.com.:443", "example.com:443", ""} {
			if _, ok := sameHost(h, "example.com", 443); !ok {
				t.Errorf("sameHost(%q) refused", h)
			}
		}
		for _, h := range []string{"example.com:1", "evil.test", "example.com.evil.test", "example.com@evil.test"} {
			if _, ok := sameHost(h, "example.com", 443); ok {
				t.Errorf("sameHost(%q) accepted", h)
			}
		}
	})
}

type countBudget struct{ left atomic.Int64 }

func (b *countBudget) Take() bool { return b.left.Add(-1) >= 0 }

// A run reports its first attempts one by one within its own
// and its uid's budget, and sums up the rest; every attempt is counted.
func TestReportGate(t *testing.T) {
	tests := []struct {
		name     string
		perRun   int
		uid      int64 // -1: no uid budget
		sent     int
		oneByOne int
	}{
		{"under budget", 10, -1, 5, 5},
		{"run budget", 10, -1, 1000, 10},
		{"uid budget", 10, 3, 1000, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			cfg := Config{Report: rec.report, ReportsPerRun: tt.perRun, AggregateInterval: time.Hour}
			if tt.uid >= 0 {
				b := &countBudget{}
				b.left.Store(tt.uid)
				cfg.UIDBudget = b
			}
			g := newReportGate(cfg)
			for i := 0; i < tt.sent; i++ {
				g.send(Attempt{Kind: "connect", Host: fmt.Sprintf("h%d.test", i%40), Port: 443, Rule: "none", Reason: "denied", Out: 1})
			}
			g.flushAll()
			one, counted := 0, 0
			var agg []Attempt
			for _, a := range rec.all() {
				if a.Kind == "aggregate" {
					agg = append(agg, a)
					counted += a.Count
					n := a.Unlisted
					for _, c := range a.Aggregate {
						n += c.Count
					}
					if n != a.Count || len(a.Aggregate) > maxAggregateKeys || a.Out != int64(a.Count) {
						t.Fatalf("aggregate does not add up: %+v", a)
					}
				} else {
					one++
				}
			}
			if one != tt.oneByOne || one+counted != tt.sent || len(agg) > 1 {
				t.Fatalf("%d one by one, %d in %d aggregates; want %d one by one of %d", one, counted, len(agg), tt.oneByOne, tt.sent)
			}
		})
	}
	t.Run("interval", func(t *testing.T) {
		rec := &recorder{}
		g := newReportGate(Config{Report: rec.report, ReportsPerRun: 1, AggregateInterval: 50 * time.Millisecond})
		for i := 0; i < 3; i++ {
			g.send(Attempt{Kind: "dns", Host: "x.test"})
		}
		time.Sleep(300 * time.Millisecond)
		if a := rec.all(); len(a) != 2 || a[1].Count != 2 {
			t.Fatalf("after the interval: %+v", a)
		}
		g.send(Attempt{Kind: "dns", Host: "y.test"})
		g.flushAll()
		a := rec.all()
		sort.Slice(a, func(i, j int) bool { return a[i].Count < a[j].Count })
		if len(a) != 3 {
			t.Fatalf("after flushAll: %+v", a)
		}
	})
}

// FuzzSameHost: a Host that sameHost accepts inside a tunnel to
// example.com:443 names example.com (any case, a trailing dot) on no port
// or 443, whatever the sandbox wrote.
func FuzzSameHost(f *testing.F) {
	for _, s := range []string{"example.com", "EXAMPLE.com.:443", "evil.test", "example.com:80", "example.com@evil.test", "[::1]:443", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got, ok := sameHost(h, "example.com", 443)
		if !ok {
			return
		}
		if h == "" {
			if got != "example.com" {
				t.Fatalf("empty Host sent as %q", got)
			}
			return
		}
		name, port, err := net.SplitHostPort(got)
		if err != nil {
			name, port = got, ""
		}
		if n, ok := normalizeName(name); !ok || n != "example.com" || (port != "" && port != "443") {
			t.Fatalf("sameHost accepted %q (sent %q)", h, got)
		}
	})
}
