package policy

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// TestDaemonTraces: daemon { traces = "…" } is off by default, takes an
// OTLP/HTTP URL (plain http only on loopback), and traces_sample is a
// share in (0, 1] that needs traces.
func TestDaemonTraces(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       TracesEndpoint
		sample     float64
		err        string
	}{
		{name: "loopback", body: `traces = "http://127.0.0.1:4318"`, want: TracesEndpoint{URL: "http://127.0.0.1:4318/v1/traces", Insecure: true}, sample: 1},
		{name: "ipv6 loopback", body: `traces = "http://[::1]:4318/"`, want: TracesEndpoint{URL: "http://[::1]:4318/v1/traces", Insecure: true}, sample: 1},
		{name: "own path", body: `traces = "http://127.0.0.1:4318/otlp/v1/traces"`, want: TracesEndpoint{URL: "http://127.0.0.1:4318/otlp/v1/traces", Insecure: true}, sample: 1},
		{name: "https anywhere", body: "traces = \"https://collector.example:4318\"\n  traces_sample = 0.25", want: TracesEndpoint{URL: "https://collector.example:4318/v1/traces"}, sample: 0.25},
		{name: "plain http elsewhere", body: `traces = "http://collector.example:4318"`, err: "http is allowed only to a literal loopback IP"},
		{name: "plain http by name", body: `traces = "http://localhost:4318"`, err: "http is allowed only to a literal loopback IP"},
		{name: "grpc scheme", body: `traces = "grpc://127.0.0.1:4317"`, err: "must start with http://"},
		{name: "no scheme", body: `traces = "127.0.0.1:4318"`, err: "is not a URL like"},
		{name: "no host", body: `traces = "https://:4318"`, err: "names no host"},
		{name: "bad port", body: `traces = "http://127.0.0.1:0"`, err: "must be a number"},
		{name: "query", body: `traces = "https://c.example/v1/traces?x=1"`, err: "no user, query or fragment"},
		{name: "user", body: `traces = "https://u:p@c.example"`, err: "no user, query or fragment"},
		{name: "sample above 1", body: "traces = \"http://127.0.0.1:4318\"\n  traces_sample = 1.5", err: "from 0 (exclusive) to 1"},
		{name: "sample 0", body: "traces = \"http://127.0.0.1:4318\"\n  traces_sample = 0", err: "greater than 0"},
		{name: "sample without traces", body: "traces_sample = 0.5", err: "daemon.traces is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte("daemon {\n  "+tc.body+"\n}\n"), "/etc/skillbox/t.hcl")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "t.hcl:") {
					t.Fatalf("error %v, want one in t.hcl containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Daemon.Traces != tc.want || !c.Daemon.Traces.Enabled() || c.Daemon.TracesSample != tc.sample {
				t.Errorf("traces %+v sample %g, want %+v sample %g", c.Daemon.Traces, c.Daemon.TracesSample, tc.want, tc.sample)
			}
		})
	}
	t.Run("off by default", func(t *testing.T) {
		c, err := Parse([]byte("daemon {}\n"), "t.hcl")
		if err != nil {
			t.Fatal(err)
		}
		if c.Daemon.Traces.Enabled() {
			t.Errorf("traces on by default: %+v", c.Daemon.Traces)
		}
	})
}

// FuzzParseTracesEndpoint: whatever daemon.traces holds, the parser
// either refuses it or returns an http(s) URL that parses again to
// itself, and plain http only to a loopback IP.
func FuzzParseTracesEndpoint(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:4318", "https://c.example:4318/x", "http://[::1]:4318/", "grpc://x", "http://localhost", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ep, err := ParseTracesEndpoint(s)
		if err != nil {
			return
		}
		again, err := ParseTracesEndpoint(ep.URL)
		if err != nil || again != ep {
			t.Fatalf("%q parsed to %+v, which parses to %+v, %v", s, ep, again, err)
		}
		u, _ := url.Parse(ep.URL)
		ip, ipErr := netip.ParseAddr(u.Hostname())
		if ep.Insecure && (u.Scheme != "http" || ipErr != nil || !ip.IsLoopback()) {
			t.Fatalf("%q: plain http to %q", s, u.Host)
		}
	})
}
