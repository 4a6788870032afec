package policy

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// TracesEndpoint is where the daemon sends its OpenTelemetry spans
// (daemon { traces = "…" }): an OTLP/HTTP collector's URL. Spans name
// skills and scripts, so plain http is accepted only to a literal
// loopback IP (a local agent or collector); anything farther away takes
// https. The zero value sends none.
type TracesEndpoint struct {
	// URL is the collector's traces URL, its path /v1/traces unless the
	// config gave another.
	URL string
	// Insecure is true for http (loopback only).
	Insecure bool
}

// Enabled says whether spans are recorded and sent at all.
func (t TracesEndpoint) Enabled() bool { return t.URL != "" }

// String is the collector's URL.
func (t TracesEndpoint) String() string { return t.URL }

// DefaultTracesSample is the share of calls traced when traces are on and
// daemon.traces_sample is not set: all of them.
const DefaultTracesSample = 1.0

// tracesPath is the OTLP/HTTP path of traces.
const tracesPath = "/v1/traces"

// ParseTracesEndpoint reads daemon.traces: "http://" and a literal
// loopback IP, or "https://" and any host, with a port and an optional
// path (/v1/traces when none). It refuses what it cannot send to, saying
// what to write instead.
func ParseTracesEndpoint(s string) (TracesEndpoint, error) {
	u, err := url.Parse(s)
	if err != nil {
		return TracesEndpoint{}, fmt.Errorf("traces endpoint %q is not a URL like \"http://127.0.0.1:4318\": %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return TracesEndpoint{}, fmt.Errorf("traces endpoint %q must start with http:// (a loopback collector) or https://; skillbox speaks OTLP over HTTP (protobuf)", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return TracesEndpoint{}, fmt.Errorf("traces endpoint %q may hold only a scheme, host, port and path (no user, query or fragment)", s)
	}
	host := u.Hostname()
	if host == "" {
		return TracesEndpoint{}, fmt.Errorf("traces endpoint %q names no host; write e.g. \"http://127.0.0.1:4318\"", s)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return TracesEndpoint{}, fmt.Errorf("traces endpoint %q: port %q must be a number from 1 to 65535", s, p)
		}
	}
	insecure := u.Scheme == "http"
	if insecure {
		ip, err := netip.ParseAddr(host)
		if err != nil || ip.Zone() != "" || !ip.IsLoopback() {
			return TracesEndpoint{}, fmt.Errorf("traces endpoint %q sends spans (skill names, script paths) in plain text: http is allowed only to a literal loopback IP (127.0.0.1 or [::1]); use https for a collector elsewhere, or a local agent that forwards", s)
		}
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = tracesPath
	}
	if !strings.HasPrefix(u.Path, "/") {
		return TracesEndpoint{}, fmt.Errorf("traces endpoint %q: path %q must start with /", s, u.Path)
	}
	u.RawPath = ""
	return TracesEndpoint{URL: u.String(), Insecure: insecure}, nil
}
