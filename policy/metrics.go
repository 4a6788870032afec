package policy

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
)

// MetricsAddress is where the daemon serves its Prometheus metrics
// (daemon { metrics = "…" }): a Unix socket ("unix:/run/skillbox/metrics.sock")
// or a TCP address on loopback ("127.0.0.1:9464", "[::1]:9464"). Metrics
// name skills and say how busy the daemon is, and the endpoint has no
// authentication of its own, so it is never served on an address another
// machine can reach: the socket's mode and group (the main socket's) or
// loopback decide who may scrape.
type MetricsAddress struct {
	Network string // "unix" or "tcp"; "" when metrics are off
	Address string // the socket's path, or host:port
}

// Enabled says whether metrics are served at all.
func (m MetricsAddress) Enabled() bool { return m.Network != "" }

// String is the address as written in the config.
func (m MetricsAddress) String() string {
	if m.Network == "unix" {
		return "unix:" + m.Address
	}
	return m.Address
}

// maxUnixSocketPath is the longest path a Unix socket may have.
const maxUnixSocketPath = 107

// ParseMetricsAddress reads daemon.metrics: "unix:" and an absolute path,
// or a literal loopback IP and a port. Anything that could be reached from
// another machine is refused, saying what to use instead.
func ParseMetricsAddress(s string) (MetricsAddress, error) {
	if path, ok := strings.CutPrefix(s, "unix:"); ok {
		switch {
		case path == "" || !filepath.IsAbs(path):
			return MetricsAddress{}, fmt.Errorf("metrics socket %q must be an absolute path, like \"unix:/run/skillbox/metrics.sock\"", path)
		case len(filepath.Clean(path)) > maxUnixSocketPath:
			return MetricsAddress{}, fmt.Errorf("metrics socket path is %d bytes, longer than a Unix socket allows (%d); pick a shorter one", len(filepath.Clean(path)), maxUnixSocketPath)
		}
		return MetricsAddress{Network: "unix", Address: filepath.Clean(path)}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return MetricsAddress{}, fmt.Errorf("metrics address %q is neither \"unix:/path\" nor a loopback \"127.0.0.1:PORT\": %w", s, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return MetricsAddress{}, fmt.Errorf("metrics address %q: port %q must be a number from 1 to 65535", s, port)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return MetricsAddress{}, fmt.Errorf("metrics address %q: host %q must be a literal loopback IP (127.0.0.1 or ::1), not a name, so what it binds to cannot change", s, host)
	}
	if !ip.IsLoopback() {
		return MetricsAddress{}, fmt.Errorf("metrics address %q is not on loopback: the endpoint has no authentication, so skillbox serves it only on 127.0.0.1, ::1 or a Unix socket (let a local agent or a proxy with TLS forward it)", s)
	}
	return MetricsAddress{Network: "tcp", Address: net.JoinHostPort(ip.String(), port)}, nil
}
