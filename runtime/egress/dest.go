// Package egress is skillbox's way out of a sandbox that policy lets reach a
// few destinations: a network namespace of the run's own, joined by a veth
// pair to a second namespace holding the only reachable address, a proxy
// skillbox runs outside the sandbox. Both ends live in namespaces of their
// own, so nothing of the host's namespace (its services, its metadata
// address) is reachable, and a connection anywhere but the proxy fails at
// once.
//
// The proxy (HTTP CONNECT and plain HTTP) checks each destination's name and
// port against the run's rules, resolves the name on the host, refuses
// addresses in private, loopback and link-local ranges unless a rule names
// them (no DNS rebinding into the host's networks), and reports every
// attempt. The sandbox's name server answers only the names the rules allow,
// with the proxy's address, and forwards nothing, so DNS queries cannot
// carry data out. Clients that ignore the proxy variables connect to that
// address on the destination's port, and the proxy takes the name from the
// TLS ClientHello or the Host header (the transparent path), with the same
// checks.
//
// A secret never enters the sandbox: it sees a placeholder, and for a
// CONNECT to one of the secret's hosts the proxy terminates TLS with a
// certificate of an in-memory CA, verifies the real host, sets the secret's
// header, and redacts every encoding of the value from the responses
// (redact.go). What a sandbox can make the proxy hold is bounded (limits.go:
// header sizes, idle time, connections at once), and a run's caps on
// connections and bytes kill the sandbox when hit.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// ErrBadDestination is wrapped by ParseRule errors.
var ErrBadDestination = errors.New("invalid egress destination")

// Rule is one allowed destination: a host name (exact, or "*.example.org"
// for any name below example.org) or an address prefix, and a port.
type Rule struct {
	// Host is a lower-case name without a trailing dot; with Wildcard it is
	// the suffix after "*.". Empty for an address rule.
	Host     string
	Wildcard bool
	// Prefix is set for address rules ("10.1.2.0/24:5432", "10.1.2.3:80").
	Prefix netip.Prefix
	Port   uint16
	// Source names what allowed it (the policy rule, file:line), for the
	// audit; not part of the destination.
	Source string
}

// maxRuleLen bounds one destination string.
const maxRuleLen = 300

// ParseRule parses "host:port", "*.domain:port", "ip:port",
// "cidr:port" and "[ipv6]:port" / "[ipv6/len]:port". The port is
// required (1-65535): a destination without one is almost always a
// mistake that would open every port.
func ParseRule(s string) (Rule, error) {
	if len(s) > maxRuleLen {
		return Rule{}, errkind.Errorf(ErrBadDestination, "longer than %d bytes", maxRuleLen)
	}
	var hostPart, portPart string
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 || !strings.HasPrefix(s[end+1:], ":") {
			return Rule{}, errkind.Errorf(ErrBadDestination, "%q: write IPv6 destinations as \"[addr]:port\" or \"[addr/len]:port\"", s)
		}
		hostPart, portPart = s[1:end], s[end+2:]
	} else {
		i := strings.LastIndex(s, ":")
		if i < 0 {
			return Rule{}, errkind.Errorf(ErrBadDestination, "%q has no port: write it as \"host:port\", e.g. \"api.example.com:443\"", s)
		}
		hostPart, portPart = s[:i], s[i+1:]
		if strings.Contains(hostPart, ":") {
			return Rule{}, errkind.Errorf(ErrBadDestination, "%q: write IPv6 destinations as \"[addr]:port\"", s)
		}
	}
	port, err := strconv.ParseUint(portPart, 10, 16)
	if err != nil || port == 0 || strings.HasPrefix(portPart, "+") || (len(portPart) > 1 && portPart[0] == '0') {
		return Rule{}, errkind.Errorf(ErrBadDestination, "%q: port %q must be a number from 1 to 65535", s, portPart)
	}
	r := Rule{Port: uint16(port)}
	if strings.Contains(hostPart, "/") {
		p, err := netip.ParsePrefix(hostPart)
		if err != nil {
			return Rule{}, errkind.Errorf(ErrBadDestination, "%q: %q is not an address range like 10.1.2.0/24", s, hostPart)
		}
		if p.Masked() != p {
			return Rule{}, errkind.Errorf(ErrBadDestination, "%q: %s has host bits set; did you mean %s?", s, p, p.Masked())
		}
		r.Prefix = p
		return r, nil
	}
	if a, err := netip.ParseAddr(hostPart); err == nil {
		if a.Zone() != "" {
			return Rule{}, errkind.Errorf(ErrBadDestination, "%q: zoned addresses are not allowed", s)
		}
		r.Prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		return r, nil
	}
	host := strings.ToLower(hostPart)
	if strings.HasPrefix(host, "*.") {
		r.Wildcard = true
		host = host[2:]
		if !strings.Contains(host, ".") {
			return Rule{}, errkind.Errorf(ErrBadDestination, "%q: a wildcard must name a domain with at least two labels, like \"*.example.org:443\"", s)
		}
	}
	if err := checkHostName(host); err != nil {
		return Rule{}, errkind.Errorf(ErrBadDestination, "%q: %w", s, err)
	}
	r.Host = host
	return r, nil
}

// checkHostName accepts DNS names of letters, digits, '-' and '_' labels.
func checkHostName(h string) error {
	if h == "" {
		return errors.New("empty host name")
	}
	if len(h) > 253 {
		return errors.New("host name longer than 253 bytes")
	}
	allDigits := true
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("label %q must be 1-63 characters", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q may not start or end with '-'", label)
		}
		for _, c := range label {
			switch {
			case c >= 'a' && c <= 'z', c == '-', c == '_':
				allDigits = false
			case c >= '0' && c <= '9':
			default:
				if c == '*' {
					return errors.New("'*' is only allowed as the whole first label (\"*.example.org\")")
				}
				return fmt.Errorf("character %q is not allowed in a host name", c)
			}
		}
	}
	if allDigits {
		return errors.New("looks like a malformed IP address")
	}
	return nil
}

// String is the destination as written in policy (canonical form).
func (r Rule) String() string {
	var h string
	switch {
	case r.Prefix.IsValid() && r.Prefix.IsSingleIP():
		h = r.Prefix.Addr().String()
	case r.Prefix.IsValid():
		h = r.Prefix.String()
	case r.Wildcard:
		h = "*." + r.Host
	default:
		h = r.Host
	}
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(int(r.Port))
}

// MatchName reports whether the rule allows name (lower case, no trailing
// dot) on port. Address rules never match names.
func (r Rule) MatchName(name string, port uint16) bool {
	if r.Port != port || r.Host == "" {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(name, "."+r.Host)
	}
	return name == r.Host
}

// MatchAddr reports whether the rule names addr on port (address rules only).
func (r Rule) MatchAddr(addr netip.Addr, port uint16) bool {
	return r.Port == port && r.Prefix.IsValid() && r.Prefix.Contains(addr.Unmap())
}

// NameAllowed reports whether any rule allows name on any port (what the
// sandbox's resolver answers).
func NameAllowed(rules []Rule, name string) bool {
	for _, r := range rules {
		if r.Host != "" && (name == r.Host && !r.Wildcard || r.Wildcard && strings.HasSuffix(name, "."+r.Host)) {
			return true
		}
	}
	return false
}

// normalizeName lower-cases a host name and drops one trailing dot; it
// reports false for anything that is not a valid name.
func normalizeName(h string) (string, bool) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if checkHostName(h) != nil {
		return "", false
	}
	return h, true
}
