package policy

import (
	"crypto/x509"
	"fmt"
	"net/netip"
	"os"
	"path"
	"regexp"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// RuleEgressDefault: no matching rule lists egress destinations.
const RuleEgressDefault = "default: no egress (no matching rule lists egress destinations)"

// egressList decodes a rule's egress = [...] (destinations like
// "api.example.com:443", "*.example.org:443", "10.1.2.0/24:5432"); each
// bad entry is a problem at its file:line.
func (b *body) egressList(r *Rule) {
	var dests []string
	a := b.strs("egress", &dests)
	if a == nil {
		return
	}
	seen := map[string]bool{}
	for _, s := range dests {
		d, err := egress.ParseRule(s)
		if err != nil {
			b.bad(a, "%s", errkind.Detail(err, egress.ErrBadDestination))
			continue
		}
		if seen[d.String()] {
			continue
		}
		seen[d.String()] = true
		d.Source = r.String()
		r.Egress = append(r.Egress, d)
	}
}

// EgressFor returns the destinations runs of a skill may reach through the
// egress proxy: those of every matching rule together, each naming the
// rule that lists it. A matching rule with network = false denies them all
// (deny wins); the string names it, or the rules that gave destinations,
// or RuleEgressDefault. It is For(skill).Egress, for callers that ask
// nothing else.
func (c *Config) EgressFor(skill string) ([]egress.Rule, string) {
	e := c.For(skill).Egress
	return e.Value, e.Rule
}

// Egress is the egress {} block: how the egress proxy resolves names.
type Egress struct {
	// HostsFile, in /etc/hosts format, maps names to addresses for the
	// proxy before DNS; its addresses are trusted as written (an internal
	// service on a private address needs no address rule). The names must
	// still be allowed by a rule's egress list.
	HostsFile string
	// UpstreamCAFile, PEM, adds CAs the proxy trusts (besides the
	// system's) when it talks TLS to the hosts secrets go to: an internal
	// API with a certificate of a private CA.
	UpstreamCAFile string
	Pos            Pos
}

var egressSchema = &hcl.BodySchema{Attributes: attrs("hosts_file", "upstream_ca_file")}

func (d *decoder) egress(blk *hcl.Block) {
	ec := &d.cfg.Egress
	ec.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, "egress", egressSchema)
	b.path("hosts_file", &ec.HostsFile)
	b.path("upstream_ca_file", &ec.UpstreamCAFile)
}

// UpstreamRoots are the system's roots plus UpstreamCAFile's (nil without
// one: the system's).
func (e Egress) UpstreamRoots() (*x509.CertPool, error) {
	if e.UpstreamCAFile == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(e.UpstreamCAFile)
	if err != nil {
		return nil, errkind.Errorf(ErrConfig, "egress.upstream_ca_file (%s): %w", e.Pos, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(raw) {
		return nil, errkind.Errorf(ErrConfig, "egress.upstream_ca_file %s holds no PEM certificate", e.UpstreamCAFile)
	}
	return pool, nil
}

// LoadHosts reads HostsFile (nil without one).
func (e Egress) LoadHosts() (map[string][]netip.Addr, error) {
	if e.HostsFile == "" {
		return nil, nil
	}
	f, err := os.Open(e.HostsFile)
	if err != nil {
		return nil, errkind.Errorf(ErrConfig, "egress.hosts_file (%s): %w", e.Pos, err)
	}
	defer f.Close()
	hosts, err := egress.ParseHosts(f)
	if err != nil {
		return nil, errkind.Errorf(ErrConfig, "egress.hosts_file %s: %w", e.HostsFile, err)
	}
	return hosts, nil
}

// Secret is a secret "NAME" {} block: a credential the egress proxy adds
// to HTTPS requests to its hosts, for runs whose egress reaches them. The
// sandbox sees only a placeholder in the environment variable NAME.
type Secret struct {
	Name     string
	FromEnv  string // the daemon's environment variable holding the value
	FromFile string // or a file holding it (a trailing newline is dropped)
	Hosts    []string
	Header   string   // "Authorization: Bearer %s"
	Skills   []string // skill name patterns; nil: every skill whose egress reaches a host
	Pos      Pos
}

// String names the block: `secret "X" (file:line)`.
func (s *Secret) String() string { return fmt.Sprintf("secret %q (%s)", s.Name, s.Pos) }

var (
	secretSchema = &hcl.BodySchema{Attributes: attrs("from_env", "from_file", "hosts", "header", "skills")}
	secretNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

func (d *decoder) secret(blk *hcl.Block) {
	name := blk.Labels[0]
	prefix := fmt.Sprintf("secret %q", name)
	if !secretNameRE.MatchString(name) {
		d.errorf(blk.LabelRanges[0], prefix, "invalid secret name: it is the sandbox's environment variable, so use letters, digits and '_', not starting with a digit")
		return
	}
	s := &Secret{Name: name, Pos: d.pos(blk.DefRange)}
	b, _ := d.body(blk.Body, prefix, secretSchema)
	env, file := b.str("from_env", &s.FromEnv), b.path("from_file", &s.FromFile)
	switch {
	case env != nil && file != nil:
		b.bad(file, "set only one of from_env and from_file")
	case env == nil && file == nil && b.attrs["from_env"] == nil && b.attrs["from_file"] == nil:
		d.errorf(blk.DefRange, prefix, "needs from_env (a variable of the daemon's environment) or from_file")
	case env != nil && !secretNameRE.MatchString(s.FromEnv):
		b.bad(env, "%q is not an environment variable name", s.FromEnv)
	}
	if a := b.strs("hosts", &s.Hosts); a != nil {
		if len(s.Hosts) == 0 {
			b.bad(a, "must name at least one host")
		}
		for i, h := range s.Hosts {
			r, err := egress.ParseRule(h + ":443")
			if err != nil || r.Host == "" || r.Wildcard {
				b.bad(a, "%q is not a host name (exact names only, no ports or wildcards)", h)
				continue
			}
			s.Hosts[i] = r.Host
		}
	} else if b.attrs["hosts"] == nil {
		d.errorf(blk.DefRange, prefix+".hosts", "is required: the hosts the secret is sent to")
	}
	if a := b.str("header", &s.Header); a != nil {
		if err := egress.CheckSecretHeader(s.Header); err != nil {
			b.bad(a, "%v", err)
		}
	} else if b.attrs["header"] == nil {
		s.Header = "Authorization: Bearer %s"
	}
	if a := b.strs("skills", &s.Skills); a != nil {
		for _, p := range s.Skills {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				b.bad(a, "invalid skill pattern %q", p)
			}
		}
	}
	for _, o := range d.cfg.Secrets {
		if o.Name == name {
			d.errorf(blk.DefRange, prefix, "declared twice (first at %s)", o.Pos)
			return
		}
	}
	d.cfg.Secrets = append(d.cfg.Secrets, s)
}

// SecretsFor are the secrets runs of skill get with its egress
// destinations: those (of the skill, when the block names skills) with a
// host the destinations allow.
func (c *Config) SecretsFor(skill string, dests []egress.Rule) []*Secret {
	var out []*Secret
	for _, s := range c.Secrets {
		if s.Skills != nil && !matchAny(s.Skills, skill) {
			continue
		}
		for _, h := range s.Hosts {
			if egress.NameAllowed(dests, h) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Value reads the secret from where the block says. Errors name the
// block, never the value.
func (s *Secret) Value() (string, error) {
	if s.FromEnv != "" {
		v, ok := os.LookupEnv(s.FromEnv)
		if !ok || v == "" {
			return "", fmt.Errorf("%s: the daemon's environment has no %s: set it where skillbox starts", s, s.FromEnv)
		}
		return v, nil
	}
	raw, err := os.ReadFile(s.FromFile)
	if err != nil {
		return "", fmt.Errorf("%s: %v", s, err)
	}
	v := strings.TrimRight(string(raw), "\r\n")
	if v == "" {
		return "", fmt.Errorf("%s: %s is empty", s, s.FromFile)
	}
	return v, nil
}
