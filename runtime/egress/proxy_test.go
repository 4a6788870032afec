package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
)

// fakeResolver maps names to addresses like a DNS server would.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

type recorder struct {
	mu sync.Mutex
	a  []Attempt
}

func (r *recorder) report(a Attempt) { r.mu.Lock(); r.a = append(r.a, a); r.mu.Unlock() }
func (r *recorder) all() []Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Attempt(nil), r.a...)
}

func mustRules(t *testing.T, ss ...string) []Rule {
	t.Helper()
	var out []Rule
	for _, s := range ss {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		r.Source = "test"
		out = append(out, r)
	}
	return out
}

// startProxy serves a proxy on loopback and returns a client using it.
func startProxy(t *testing.T, cfg Config) (*Proxy, *http.Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg.Report = rec.report
	p := NewProxy(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(l)
	t.Cleanup(func() { p.Shutdown() })
	pu, _ := url.Parse("http://" + l.Addr().String())
	c := &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(pu),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	return p, c, rec
}

func port(t *testing.T, u string) string {
	t.Helper()
	pu, _ := url.Parse(u)
	return pu.Port()
}

func TestProxy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello %s %d", r.Host, len(b))
	}))
	defer srv.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secure") }))
	defer tlsSrv.Close()
	hp, tp := port(t, srv.URL), port(t, tlsSrv.URL)
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	cfg := Config{
		Rules:    mustRules(t, "allowed.test:"+hp, "secure.test:"+tp, "*.wild.test:"+hp, "rebind.test:"+hp),
		Hosts:    map[string][]netip.Addr{"allowed.test": lo, "secure.test": lo, "a.wild.test": lo},
		Resolver: fakeResolver{"rebind.test": lo},
	}
	_, c, rec := startProxy(t, cfg)

	tests := []struct {
		name, url string
		status    int
		body      string
		allowed   bool
		reason    string
	}{
		{"http allowed", "http://allowed.test:" + hp + "/x", 200, "hello allowed.test:" + hp, true, ""},
		{"https allowed", "https://secure.test:" + tp + "/", 200, "secure", true, ""},
		{"wildcard", "http://a.wild.test:" + hp + "/", 200, "hello", true, ""},
		{"denied name", "http://denied.test:" + hp + "/", 403, "", false, "not in the run's egress rules"},
		{"denied port", "http://allowed.test:" + tp + "/", 403, "", false, "not on port"},
		{"raw ip", "http://127.0.0.1:" + hp + "/", 403, "", false, "raw addresses"},
		{"rebinding", "http://rebind.test:" + hp + "/", 403, "", false, "non-public"},
		{"https denied", "https://denied.test:" + tp + "/", -1, "", false, "not in the run's egress rules"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(rec.all())
			resp, err := c.Get(tt.url)
			if tt.status == -1 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("CONNECT to a denied host succeeded")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.body) {
					t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tt.status, tt.body)
				}
			}
			c.CloseIdleConnections()
			var got []Attempt
			waitfor.Within(2*time.Second, func() bool { got = rec.all(); return len(got) > n })
			if len(got) != n+1 {
				t.Fatalf("%d attempts reported, want %d", len(got)-n, 1)
			}
			a := got[n]
			if a.Allowed != tt.allowed || !strings.Contains(a.Reason, tt.reason) {
				t.Fatalf("attempt %+v; want allowed=%v reason ~ %q", a, tt.allowed, tt.reason)
			}
			if a.Allowed && (a.Out == 0 || a.In == 0 || !strings.Contains(a.Rule, "from test")) {
				t.Fatalf("allowed attempt without bytes or rule: %+v", a)
			}
		})
	}
}

func TestProxyLimits(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	hp := port(t, srv.URL)
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	base := Config{Rules: mustRules(t, "allowed.test:"+hp), Hosts: map[string][]netip.Addr{"allowed.test": lo}}

	t.Run("connections", func(t *testing.T) {
		cfg := base
		cfg.MaxConnections = 2
		p, c, _ := startProxy(t, cfg)
		for i := 0; i < 3; i++ {
			resp, err := c.Get("http://allowed.test:" + hp + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := 200
			if i == 2 {
				want = 403
			}
			if resp.StatusCode != want {
				t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
			}
		}
		st := p.Shutdown()
		if st.LimitHit != LimitConnections || st.Connections != 2 {
			t.Fatalf("stats %+v", st)
		}
		select {
		case <-p.Over():
		default:
			t.Fatal("Over not closed")
		}
	})
	t.Run("bytes out", func(t *testing.T) {
		cfg := base
		cfg.MaxBytesOut = 4096
		p, c, rec := startProxy(t, cfg)
		resp, err := c.Post("http://allowed.test:"+hp+"/", "text/plain", strings.NewReader(strings.Repeat("x", 10000)))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Fatal("a post over the byte cap went through")
			}
		}
		st := p.Shutdown()
		if st.LimitHit != LimitBytesOut || st.BytesOut > 4096 {
			t.Fatalf("stats %+v", st)
		}
		if a := rec.all(); len(a) != 1 || a[0].Limit != LimitBytesOut {
			t.Fatalf("attempts %+v", a)
		}
	})
}

func TestDNSServer(t *testing.T) {
	d := &dnsServer{rules: mustRules(t, "api.example.com:443", "*.example.org:443"), answer: netip.MustParseAddr("100.64.0.1")}
	var denied []string
	d.onDeny = func(n string) { denied = append(denied, n) }
	for _, tt := range []struct {
		name string
		ok   bool
	}{{"api.example.com.", true}, {"x.example.org.", true}, {"evil.example.com.", false}, {"secret-data.attacker.net.", false}} {
		t.Run(tt.name, func(t *testing.T) {
			q := buildQuery(t, tt.name)
			resp := d.handle(q)
			rcode, answers := parseAnswer(t, resp)
			if tt.ok && (rcode != 0 || len(answers) != 1 || answers[0] != "100.64.0.1") {
				t.Fatalf("rcode %d answers %v", rcode, answers)
			}
			if !tt.ok && (rcode != 3 || len(answers) != 0) {
				t.Fatalf("denied name: rcode %d answers %v", rcode, answers)
			}
		})
	}
	if len(denied) != 2 {
		t.Fatalf("denied reports %v", denied)
	}
}

func TestSecretsOnlyForTheirHosts(t *testing.T) {
	cfg := Config{Secrets: []Secret{{Name: "T", Value: "v", Hosts: []string{"api.example.com"}, Header: "Authorization: Bearer %s"}}}
	if got := cfg.secretsFor("api.example.com"); len(got) != 1 {
		t.Fatalf("secretsFor(api) = %v", got)
	}
	for _, h := range []string{"example.com", "x.api.example.com", "api.example.com.evil.net"} {
		if got := cfg.secretsFor(h); len(got) != 0 {
			t.Errorf("secretsFor(%s) = %v", h, got)
		}
	}
	h := http.Header{}
	cfg.Secrets[0].apply(h)
	if h.Get("Authorization") != "Bearer v" {
		t.Errorf("header %v", h)
	}
	for _, bad := range []string{"Authorization Bearer %s", "Authorization: Bearer", "X: %s %s", "X: %d %s", ": %s"} {
		if CheckSecretHeader(bad) == nil {
			t.Errorf("CheckSecretHeader(%q) accepted", bad)
		}
	}
	if err := CheckSecretHeader("X-Api-Key: %s"); err != nil {
		t.Error(err)
	}
}

// The transparent path: a client that connects straight to the proxy's
// address on the destination's port (here the upstreams listen on other
// loopback addresses with the same ports).
func TestTransparent(t *testing.T) {
	listen := func(addr string) net.Listener {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("cannot listen on %s: %v", addr, err)
		}
		return l
	}
	plain := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "plain "+r.Host) }))
	plain.Listener = listen("127.0.0.2:0")
	plain.Start()
	defer plain.Close()
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secure") }))
	secure.Listener = listen("127.0.0.3:0")
	secure.StartTLS()
	defer secure.Close()
	pp, sp := port(t, plain.URL), port(t, secure.URL)
	rec := &recorder{}
	p := NewProxy(Config{
		Rules:  mustRules(t, "allowed.test:"+pp, "example.com:"+sp),
		Hosts:  map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("127.0.0.2")}, "example.com": {netip.MustParseAddr("127.0.0.3")}},
		Report: rec.report,
	})
	defer p.Shutdown()
	for _, ps := range []string{pp, sp} {
		l := listen("127.0.0.1:" + ps)
		defer l.Close()
		var n uint16
		fmt.Sscan(ps, &n)
		go p.serveTransparent(l, n)
	}
	get := func(host string) (int, string) {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:"+pp+"/", nil)
		req.Host = host
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("allowed.test:" + pp); code != 200 || body != "plain allowed.test:"+pp {
		t.Errorf("allowed: %d %q", code, body)
	}
	if code, body := get("denied.test"); code != 403 || !strings.Contains(body, "not in the run's egress rules") {
		t.Errorf("denied: %d %q", code, body)
	}
	tc := &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "example.com"}}}
	resp, err := tc.Get("https://127.0.0.1:" + sp + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "secure" {
		t.Errorf("TLS through the transparent path: %q", b)
	}
	tc.CloseIdleConnections()
	st := p.Shutdown()
	if st.Connections != 2 || st.Denied != 1 {
		t.Errorf("stats %+v attempts %+v", st, rec.all())
	}
	for _, a := range rec.all() {
		if a.Kind != "transparent" {
			t.Errorf("attempt %+v", a)
		}
	}
}
