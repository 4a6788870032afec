package policy

import (
	"strings"
	"testing"
)

// TestDaemonMetrics: daemon { metrics = "…" } is off by default, takes a
// Unix socket or a loopback address, and refuses anything another machine
// could reach.
func TestDaemonMetrics(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        MetricsAddress
		err         string
	}{
		{name: "unix", value: "unix:/run/skillbox/metrics.sock", want: MetricsAddress{Network: "unix", Address: "/run/skillbox/metrics.sock"}},
		{name: "unix cleaned", value: "unix:/run/skillbox//m.sock", want: MetricsAddress{Network: "unix", Address: "/run/skillbox/m.sock"}},
		{name: "ipv4 loopback", value: "127.0.0.1:9464", want: MetricsAddress{Network: "tcp", Address: "127.0.0.1:9464"}},
		{name: "other 127/8", value: "127.0.0.2:9464", want: MetricsAddress{Network: "tcp", Address: "127.0.0.2:9464"}},
		{name: "ipv6 loopback", value: "[::1]:9464", want: MetricsAddress{Network: "tcp", Address: "[::1]:9464"}},
		{name: "relative socket", value: "unix:metrics.sock", err: "must be an absolute path"},
		{name: "empty socket", value: "unix:", err: "must be an absolute path"},
		{name: "long socket", value: "unix:/" + strings.Repeat("a", 120), err: "longer than a Unix socket allows"},
		{name: "all interfaces", value: "0.0.0.0:9464", err: "is not on loopback"},
		{name: "no host", value: ":9464", err: "must be a literal loopback IP"},
		{name: "public", value: "192.0.2.1:9464", err: "is not on loopback"},
		{name: "ipv6 any", value: "[::]:9464", err: "is not on loopback"},
		{name: "name", value: "localhost:9464", err: "must be a literal loopback IP"},
		{name: "no port", value: "127.0.0.1", err: "neither \"unix:/path\""},
		{name: "bad port", value: "127.0.0.1:http", err: "must be a number"},
		{name: "port 0", value: "127.0.0.1:0", err: "must be a number"},
		{name: "empty", value: "", err: "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte("daemon {\n  metrics = \""+tc.value+"\"\n}\n"), "/etc/skillbox/m.hcl")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "m.hcl:2") {
					t.Fatalf("error %v, want one at m.hcl:2 containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Daemon.Metrics != tc.want || !c.Daemon.Metrics.Enabled() || c.Daemon.Metrics.String() != strings.ReplaceAll(tc.value, "//", "/") {
				t.Errorf("metrics %+v (%s), want %+v", c.Daemon.Metrics, c.Daemon.Metrics, tc.want)
			}
		})
	}
	t.Run("off by default", func(t *testing.T) {
		c, err := Parse([]byte("daemon {}\n"), "m.hcl")
		if err != nil {
			t.Fatal(err)
		}
		if c.Daemon.Metrics.Enabled() {
			t.Errorf("metrics on by default: %+v", c.Daemon.Metrics)
		}
	})
}
