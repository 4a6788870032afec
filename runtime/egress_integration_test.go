//go:build integration

package runtime_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
)

// egressProbe is the script the egress tests run: each check prints one
// JSON line {name, ok, detail}.
const egressProbe = `
import json, os, socket, ssl, sys, urllib.request, urllib.error
port, tport = sys.argv[1], sys.argv[2]
def out(name, ok, detail=""):
    print(json.dumps({"name": name, "ok": ok, "detail": str(detail)[:300]}), flush=True)
def get(url):
    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=20, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except Exception as e:
        return 0, repr(e)
s, b = get("http://allowed.test:%s/hello" % port)
out("http_allowed", s == 200 and "hello from test server" in b, (s, b))
s, b = get("https://secure.test:%s/" % tport)
out("https_allowed", s == 200 and "secure hello" in b, (s, b))
s, b = get("http://denied.test:%s/" % port)
out("denied_name", s == 403, (s, b))
s, b = get("http://allowed.test:%s/" % tport)
out("denied_port", s == 403, (s, b))
s, b = get("http://10.9.9.9:%s/" % port)
out("raw_ip", s == 403, (s, b))
s, b = get("https://denied.test:%s/" % tport)
out("https_denied", s != 200, (s, b))
try:
    socket.create_connection(("1.1.1.1", 80), timeout=10).close()
    out("direct", False, "connected")
except OSError as e:
    out("direct", True, e)
try:
    socket.getaddrinfo("denied.test", 80)
    out("dns_denied", False, "resolved")
except socket.gaierror as e:
    out("dns_denied", True, e)
try:
    a = socket.getaddrinfo("allowed.test", 80, socket.AF_INET)
    out("dns_allowed", len(a) > 0, a[0][4])
except socket.gaierror as e:
    out("dns_allowed", False, e)
out("env", os.environ.get("HTTPS_PROXY", "").startswith("http://100."), os.environ.get("HTTPS_PROXY"))
# Clients that ignore the proxy variables: straight to the name's address.
import http.client
try:
    c = http.client.HTTPConnection("allowed.test", int(port), timeout=20)
    c.request("GET", "/direct")
    r = c.getresponse()
    out("transparent_http", r.status == 200 and b"hello from test server" in r.read(), r.status)
except Exception as e:
    out("transparent_http", False, repr(e))
try:
    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    c = http.client.HTTPSConnection("secure.test", int(tport), timeout=20, context=ctx)
    c.request("GET", "/")
    r = c.getresponse()
    out("transparent_https", r.status == 200 and b"secure hello" in r.read(), r.status)
except Exception as e:
    out("transparent_https", False, repr(e))
`

type attemptLog struct {
	mu sync.Mutex
	a  []egress.Attempt
}

func (l *attemptLog) report(a egress.Attempt) { l.mu.Lock(); l.a = append(l.a, a); l.mu.Unlock() }

func testServers(t *testing.T) (plainPort, tlsPort string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "hello from test server")
	}))
	t.Cleanup(srv.Close)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secure hello") }))
	t.Cleanup(tlsSrv.Close)
	pu, _ := url.Parse(srv.URL)
	tu, _ := url.Parse(tlsSrv.URL)
	return pu.Port(), tu.Port()
}

func egressConfig(t *testing.T, log *attemptLog, dests ...string) *egress.Config {
	t.Helper()
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	cfg := &egress.Config{
		// The test servers listen on the host's loopback; the test names
		// them through the proxy's static hosts (trusted as written).
		Hosts:  map[string][]netip.Addr{"allowed.test": lo, "secure.test": lo},
		Report: log.report,
	}
	for _, d := range dests {
		r, err := egress.ParseRule(d)
		if err != nil {
			t.Fatal(err)
		}
		r.Source = "test rule"
		cfg.Rules = append(cfg.Rules, r)
	}
	return cfg
}

func TestEgress(t *testing.T) {
	rootfs := testRootfs(t)
	port, tport := testServers(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			rt, opts := newBackend(t, backend)
			skill := makeSkill(t, map[string]string{"scripts/probe.py": egressProbe})
			log := &attemptLog{}
			id := newID()
			res, err := rt.Run(context.Background(), runtime.Job{
				Sandbox:    runtime.SandboxSpec{ID: id, RootFS: rootfs, SkillDir: skill, Egress: egressConfig(t, log, "allowed.test:"+port, "secure.test:"+tport)},
				Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/probe.py", port, tport}, Limits: runtime.Limits{Timeout: 120e9}},
			})
			if err != nil {
				t.Fatal(err)
			}
			wantExit(t, res, 0, runtime.ReasonExit)
			t.Logf("probe:\n%s", res.Stdout)
			seen := map[string]bool{}
			for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
				var c struct {
					Name   string `json:"name"`
					OK     bool   `json:"ok"`
					Detail string `json:"detail"`
				}
				if err := json.Unmarshal([]byte(line), &c); err != nil {
					t.Fatalf("bad line %q (stderr %s)", line, clip(res.Stderr))
				}
				seen[c.Name] = true
				if !c.OK {
					t.Errorf("%s: failed: %s", c.Name, c.Detail)
				}
			}
			if len(seen) != 12 {
				t.Errorf("%d checks ran, want 12; stderr %s", len(seen), clip(res.Stderr))
			}
			// Each attempt through the proxy is reported with its rule.
			log.mu.Lock()
			got := append([]egress.Attempt(nil), log.a...)
			log.mu.Unlock()
			want := []struct {
				host    string
				port    string
				allowed bool
			}{
				{"allowed.test", port, true}, {"secure.test", tport, true}, {"denied.test", port, false},
				{"allowed.test", tport, false}, {"", port, false}, {"denied.test", tport, false},
				{"allowed.test", port, true}, {"secure.test", tport, true},
			}
			var conns []egress.Attempt
			dnsDenied := false
			for _, a := range got {
				if a.Kind == "dns" {
					dnsDenied = dnsDenied || a.Host == "denied.test"
					continue
				}
				conns = append(conns, a)
			}
			if !dnsDenied {
				t.Errorf("the refused name was not reported: %+v", got)
			}
			if len(conns) != len(want) {
				t.Fatalf("%d connection attempts reported, want %d: %+v", len(conns), len(want), conns)
			}
			// An attempt is reported when its connection ends, so a
			// tunnel can come after the requests that followed it.
			used := make([]bool, len(conns))
			for i, w := range want {
				var a egress.Attempt
				for j, c := range conns {
					if !used[j] && c.Host == w.host && fmt.Sprint(c.Port) == w.port && c.Allowed == w.allowed {
						used[j], a = true, c
						break
					}
				}
				if a.Kind == "" {
					t.Errorf("no attempt %+v among %+v", w, conns)
					continue
				}
				if a.Allowed && (!strings.Contains(a.Rule, "test rule") || a.Out == 0 || a.In == 0 || a.Address != "127.0.0.1") {
					t.Errorf("allowed attempt %d lacks rule, bytes or address: %+v", i, a)
				}
				if !a.Allowed && (a.Rule != "none" || a.Reason == "") {
					t.Errorf("denied attempt %d lacks a reason: %+v", i, a)
				}
			}
			if res.Egress == nil || res.Egress.Connections != 4 || res.Egress.BytesOut == 0 || res.Egress.Denied < 5 {
				t.Errorf("egress stats %+v", res.Egress)
			}
			assertClean(t, backend, opts, id)
			assertNoNetns(t, id)
		})
	}
}

func TestEgressCaps(t *testing.T) {
	rootfs := testRootfs(t)
	port, _ := testServers(t)
	script := `
import sys, urllib.request
for i in range(3):
    try:
        urllib.request.urlopen("http://allowed.test:%s/" % sys.argv[1], data=b"x" * int(sys.argv[2]), timeout=20).read()
        print("ok", i, flush=True)
    except Exception as e:
        print("failed", i, e, flush=True)
import time; time.sleep(60)
`
	for _, backend := range backends {
		for _, tc := range []struct {
			name  string
			conns int
			bytes int64
			post  string
			limit string
		}{
			{"connections", 2, 0, "10", egress.LimitConnections},
			{"bytes_out", 0, 64 << 10, "100000", egress.LimitBytesOut},
		} {
			t.Run(backend+"/"+tc.name, func(t *testing.T) {
				rt, opts := newBackend(t, backend)
				skill := makeSkill(t, map[string]string{"scripts/caps.py": script})
				log := &attemptLog{}
				cfg := egressConfig(t, log, "allowed.test:"+port)
				id := newID()
				res, err := rt.Run(context.Background(), runtime.Job{
					Sandbox: runtime.SandboxSpec{ID: id, RootFS: rootfs, SkillDir: skill, Egress: cfg,
						Limits: runtime.Limits{EgressConnections: tc.conns, EgressBytesOut: tc.bytes}},
					Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/caps.py", port, tc.post}, Limits: runtime.Limits{Timeout: 120e9}},
				})
				if err != nil {
					t.Fatal(err)
				}
				if res.Reason != runtime.ReasonEgressCap || res.Egress == nil || res.Egress.LimitHit != tc.limit {
					t.Errorf("reason %s egress %+v; want %s by %s\nstdout %s\nstderr %s", res.Reason, res.Egress, runtime.ReasonEgressCap, tc.limit, res.Stdout, clip(res.Stderr))
				}
				assertClean(t, backend, opts, id)
				assertNoNetns(t, id)
			})
		}
	}
}

// assertNoNetns checks that the run's namespaces are gone.
func assertNoNetns(t *testing.T, id string) {
	t.Helper()
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), egress.NamespacePrefix) && strings.HasSuffix(e.Name(), id) {
			t.Errorf("network namespace left: %s", filepath.Join("/run/netns", e.Name()))
		}
	}
}

// secretProbe calls the secret's host over HTTPS, verifying its
// certificate with the default context (the run's CA bundle), and then
// looks for the secret's value everywhere it can: its environment, the
// files it can read under /proc/self and /etc, and its own memory.
const secretProbe = `
import os, sys, ssl, urllib.request
port, name, h1, h2 = sys.argv[1], sys.argv[2], sys.argv[3].encode(), sys.argv[4].encode()
# The value comes in two halves, and is never put together here: finding
# it in memory must not find the probe's own copy.
def has(data):
    i = data.find(h1)
    while i >= 0:
        if data[i + len(h1):i + len(h1) + len(h2)] == h2:
            return True
        i = data.find(h1, i + 1)
    return False
print("env:", os.environ.get(name))
with urllib.request.urlopen("https://example.com:%s/" % port, timeout=20) as r:
    print("response:", r.status, r.read().decode())
found = []
if has(open("/proc/self/environ", "rb").read()):
    found.append("environ")
for p in ("/proc/self/cmdline", "/etc/resolv.conf", "/etc/hosts", os.environ.get("SSL_CERT_FILE", "")):
    try:
        if has(open(p, "rb").read()):
            found.append(p)
    except OSError:
        pass
scanned = 0
try:
    mem = open("/proc/self/mem", "rb", 0)
    for line in open("/proc/self/maps"):
        f = line.split()
        if "r" not in f[1]:
            continue
        a, b = (int(x, 16) for x in f[0].split("-"))
        try:
            mem.seek(a)
            chunk = mem.read(b - a)
        except (OSError, ValueError, OverflowError):
            continue
        scanned += len(chunk)
        if has(chunk):
            found.append("memory " + line.strip())
except OSError as e:
    print("memory not readable:", e)
print("scanned:", scanned > 0)
print("found:", found)
`

func TestEgressSecret(t *testing.T) {
	rootfs := testRootfs(t)
	secret := "tok-" + randomHex(16)
	var seen sync.Map
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization"), true)
		if r.Header.Get("Authorization") == "Bearer "+secret {
			fmt.Fprint(w, "authorized")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	tu, _ := url.Parse(srv.URL)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	ca, err := egress.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			rt, opts := newBackend(t, backend)
			skill := makeSkill(t, map[string]string{"scripts/secret.py": secretProbe})
			log := &attemptLog{}
			// The test server's certificate is for example.com.
			cfg := egressConfig(t, log, "example.com:"+tu.Port())
			cfg.Hosts["example.com"] = cfg.Hosts["secure.test"]
			cfg.CA, cfg.UpstreamRoots = ca, roots
			cfg.Secrets = []egress.Secret{{Name: "API_TOKEN", Value: secret, Hosts: []string{"example.com"}, Header: "Authorization: Bearer %s"}}
			id := newID()
			res, err := rt.Run(context.Background(), runtime.Job{
				Sandbox:    runtime.SandboxSpec{ID: id, RootFS: rootfs, SkillDir: skill, Egress: cfg},
				Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/secret.py", tu.Port(), "API_TOKEN", secret[:10], secret[10:]}, Limits: runtime.Limits{Timeout: 120e9}},
			})
			if err != nil {
				t.Fatal(err)
			}
			wantExit(t, res, 0, runtime.ReasonExit)
			out := string(res.Stdout)
			t.Logf("probe:\n%s", out)
			if !strings.Contains(out, "env: "+egress.Placeholder("API_TOKEN")) || !strings.Contains(out, "response: 200 authorized") ||
				!strings.Contains(out, "found: []") {
				t.Errorf("secret probe:\n%s\nstderr %s", out, clip(res.Stderr))
			}
			if strings.Contains(out, secret) || strings.Contains(string(res.Stderr), secret) {
				t.Errorf("the secret reached the sandbox")
			}
			log.mu.Lock()
			raw, _ := json.Marshal(log.a)
			log.mu.Unlock()
			if strings.Contains(string(raw), secret) || !strings.Contains(string(raw), `"secrets":["API_TOKEN"]`) {
				t.Errorf("attempts: %s", raw)
			}
			assertClean(t, backend, opts, id)
			assertNoNetns(t, id)
		})
	}
}

// TestSweepEgress crashes a helper process during a run with egress: the
// sweep removes the run's namespaces with the rest of it.
func TestSweepEgress(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			dir := makeSkill(t, map[string]string{"scripts/sleep.py": "import time\nprint('up', flush=True)\ntime.sleep(1000)\n"})
			id := newID()
			marker := "skillbox-marker-" + randomHex(8)
			crashMidRun(t, crashCommand(name, opts, id, rootfs, dir, marker, "egress-up"))
			if _, err := os.Stat(filepath.Join("/run/netns", egress.NamespacePrefix+"s-"+id)); err != nil {
				t.Fatalf("the crash left no namespace: %v", err)
			}
			if err := runtime.Sweep(context.Background(), rt); err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			assertClean(t, name, opts, id)
			assertNoNetns(t, id)
		})
	}
}
