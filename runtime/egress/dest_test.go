package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		in, canon string
		wantErr   bool
	}{
		{"api.example.com:443", "api.example.com:443", false},
		{"API.Example.com:443", "api.example.com:443", false},
		{"*.example.org:443", "*.example.org:443", false},
		{"10.1.2.0/24:5432", "10.1.2.0/24:5432", false},
		{"10.1.2.3:80", "10.1.2.3:80", false},
		{"[2001:db8::1]:443", "[2001:db8::1]:443", false},
		{"[2001:db8::/32]:443", "[2001:db8::/32]:443", false},
		{"registry.npmjs.org:443", "registry.npmjs.org:443", false},
		{"api.example.com", "", true},
		{"api.example.com:0", "", true},
		{"api.example.com:65536", "", true},
		{"api.example.com:+1", "", true},
		{"api.example.com:0443", "", true},
		{"*.com:443", "", true},
		{"a.*.com:443", "", true},
		{"*:443", "", true},
		{"10.1.2.1/24:5432", "", true},
		{"2001:db8::1:443", "", true},
		{"bad host:443", "", true},
		{"-x.example.com:443", "", true},
		{"1.2.3:80", "", true},
		{":443", "", true},
		{"[fe80::1%eth0]:443", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRule(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrBadDestination) {
					t.Fatalf("ParseRule(%q) = %v, %v; want ErrBadDestination", tt.in, r, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.String() != tt.canon {
				t.Fatalf("String() = %q, want %q", r.String(), tt.canon)
			}
		})
	}
}

func TestRuleMatch(t *testing.T) {
	exact, _ := ParseRule("api.example.com:443")
	wild, _ := ParseRule("*.example.org:443")
	cidr, _ := ParseRule("10.1.2.0/24:5432")
	tests := []struct {
		name string
		r    Rule
		host string
		addr string
		port uint16
		want bool
	}{
		{"exact", exact, "api.example.com", "", 443, true},
		{"exact other port", exact, "api.example.com", "", 80, false},
		{"exact sub", exact, "x.api.example.com", "", 443, false},
		{"wild sub", wild, "a.example.org", "", 443, true},
		{"wild deep", wild, "a.b.example.org", "", 443, true},
		{"wild apex", wild, "example.org", "", 443, false},
		{"wild suffix trick", wild, "badexample.org", "", 443, false},
		{"cidr in", cidr, "", "10.1.2.7", 5432, true},
		{"cidr out", cidr, "", "10.1.3.7", 5432, false},
		{"cidr port", cidr, "", "10.1.2.7", 5433, false},
		{"cidr mapped", cidr, "", "::ffff:10.1.2.7", 5432, true},
		{"cidr no name", cidr, "10.1.2.7", "", 5432, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got bool
			if tt.addr != "" {
				got = tt.r.MatchAddr(netip.MustParseAddr(tt.addr), tt.port)
			} else {
				got = tt.r.MatchName(tt.host, tt.port)
			}
			if got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPublicAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1::1": true,
		"127.0.0.1": false, "10.0.0.1": false, "192.168.1.1": false, "172.16.0.1": false,
		"169.254.169.254": false, "100.64.0.1": false, "0.0.0.0": false, "::1": false,
		"fd00::1": false, "fe80::1": false, "::ffff:127.0.0.1": false, "224.0.0.1": false,
	} {
		if got := publicAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("publicAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"api.example.com:443", "*.example.org:443", "10.1.2.0/24:5432",
		"[2001:db8::/32]:443", "x:1", "[::1]:80", "1.2.3.4:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if !errors.Is(err, ErrBadDestination) {
				t.Fatalf("error does not wrap ErrBadDestination: %v", err)
			}
			return
		}
		if r.Port == 0 {
			t.Fatalf("%q parsed with port 0", s)
		}
		if (r.Host == "") == !r.Prefix.IsValid() {
			t.Fatalf("%q: exactly one of host and prefix must be set: %+v", s, r)
		}
		// The canonical form parses back to the same rule.
		r2, err := ParseRule(r.String())
		if err != nil || r2 != r {
			t.Fatalf("%q -> %q -> %+v, %v", s, r.String(), r2, err)
		}
	})
}

func TestParseHosts(t *testing.T) {
	h, err := ParseHosts(strings.NewReader("# test names\n127.0.0.1 Allowed.test other.test # trailing\n\n::1 v6.test\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 || h["allowed.test"][0].String() != "127.0.0.1" || h["v6.test"][0].String() != "::1" {
		t.Fatalf("hosts %v", h)
	}
	for _, bad := range []string{"notanip name\n", "127.0.0.1\n", "127.0.0.1 bad_name!\n"} {
		if _, err := ParseHosts(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("ParseHosts(%q) = %v", bad, err)
		}
	}
}
