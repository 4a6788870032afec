package policy

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// PackageSources are where dependency layers get their packages: the
// python_index {} and npm_registry {} blocks. Without them nothing is ever
// fetched, and a skill whose declared packages its image lacks is told
// exactly which are missing.
type PackageSources struct {
	// PythonIndex is a PEP 503 simple index ("https://pypi.org/simple").
	PythonIndex string
	// FindLinks are local directories or URLs of wheels pip also searches.
	FindLinks []string
	PythonPos Pos
	// NpmRegistry is an npm registry ("https://registry.npmjs.org").
	NpmRegistry string
	NpmPos      Pos
}

// Dependencies is the dependencies {} block: what a run whose layer is not
// built yet does.
type Dependencies struct {
	// WhenNotReady is "wait" (the default: wait for a build in progress, up
	// to WaitTimeout) or "fail" (fail at once with a clear error).
	WhenNotReady string
	WaitTimeout  time.Duration
	// BuildOnLoad starts a layer's build in the background when a skill is
	// loaded (default true).
	BuildOnLoad bool
	// MaxLayerBytes caps an installed dependency layer (default 1GiB): a
	// build over it fails, stopped while unpacking.
	MaxLayerBytes int64
	Pos           Pos
}

// RulePackages is a policy rule's packages {} block: packages an operator
// adds for the skills the rule matches.
type RulePackages struct {
	Python []string
	Npm    []string
	Pos    Pos
}

// SkillPackages (SkillPolicy.Packages) is what the config adds to one
// skill's dependencies: the packages blocks and build_from_source of every
// rule that matches the skill (all matching rules apply together; a single
// build_from_source = false denies it).
type SkillPackages struct {
	Python, Npm []string
	// BuildFromSource: some matching rule allows building sdists and
	// running npm install scripts (sandboxed, offline) for the skill.
	BuildFromSource bool
	// Where names the rules that contributed ("policy \"x\" (f.hcl:3)").
	Where string
}

func (r *Rule) matches(skill string) bool {
	for _, p := range r.Skills {
		if ok, _ := path.Match(p, skill); ok {
			return true
		}
	}
	return false
}

var (
	pipNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._\-\[\], <>=!~;'"()*+]*$`)
	npmSpecRE = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*(@[A-Za-z0-9 .*^~<>=|x+-]*)?$`)
)

var (
	pythonIndexSchema  = &hcl.BodySchema{Attributes: attrs("url", "find_links")}
	npmRegistrySchema  = &hcl.BodySchema{Attributes: attrs("url")}
	dependenciesSchema = &hcl.BodySchema{Attributes: attrs("when_not_ready", "wait_timeout", "build_on_load", "max_layer_bytes")}
	packagesSchema     = &hcl.BodySchema{Attributes: attrs("python", "npm")}
)

func (b *body) sourceURL(name string, dst *string) {
	var s string
	a := b.str(name, &s)
	if a == nil {
		return
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		b.bad(a, "%q must be an http or https URL", s)
		return
	}
	*dst = s
}

func (d *decoder) pythonIndex(blk *hcl.Block) {
	b, _ := d.body(blk.Body, "python_index", pythonIndexSchema)
	s := &d.cfg.Sources
	s.PythonPos = d.pos(blk.DefRange)
	b.sourceURL("url", &s.PythonIndex)
	var links []string
	if a := b.strs("find_links", &links); a != nil {
		for _, l := range links {
			if u, err := url.Parse(l); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
				s.FindLinks = append(s.FindLinks, l)
			} else if l != "" && !strings.Contains(l, "://") {
				s.FindLinks = append(s.FindLinks, d.resolve(l))
			} else {
				b.bad(a, "%q: use a directory of wheels or an http(s) URL", l)
			}
		}
	}
	if s.PythonIndex == "" && len(s.FindLinks) == 0 {
		d.errorf(blk.DefRange, "python_index", "set url (a PEP 503 simple index) or find_links (directories of wheels)")
	}
}

func (d *decoder) npmRegistry(blk *hcl.Block) {
	b, _ := d.body(blk.Body, "npm_registry", npmRegistrySchema)
	d.cfg.Sources.NpmPos = d.pos(blk.DefRange)
	b.sourceURL("url", &d.cfg.Sources.NpmRegistry)
	if b.attrs["url"] == nil {
		d.errorf(blk.DefRange, "npm_registry.url", "is required, like url = \"https://registry.npmjs.org\"")
	}
}

func (d *decoder) dependencies(blk *hcl.Block) {
	b, _ := d.body(blk.Body, "dependencies", dependenciesSchema)
	c := &d.cfg.Deps
	c.Pos = d.pos(blk.DefRange)
	b.oneOf("when_not_ready", &c.WhenNotReady, "wait", "fail")
	b.duration("wait_timeout", &c.WaitTimeout)
	b.boolean("build_on_load", &c.BuildOnLoad)
	b.size("max_layer_bytes", &c.MaxLayerBytes)
}

// rulePackages decodes a policy rule's packages block and build_from_source.
func (d *decoder) rulePackages(r *Rule, b *body, blk *hcl.Block) {
	var allow bool
	if b.boolean("build_from_source", &allow) != nil {
		r.BuildFromSource = &allow
	}
	if blk == nil {
		return
	}
	prefix := b.prefix + ".packages"
	pb, _ := d.body(blk.Body, prefix, packagesSchema)
	p := &RulePackages{Pos: d.pos(blk.DefRange)}
	if a := pb.strs("python", &p.Python); a != nil {
		for _, s := range p.Python {
			if !pipNameRE.MatchString(s) || strings.ContainsAny(s, "@/\\") {
				pb.bad(a, "%q is not a Python requirement (name and version specifiers, e.g. \"pillow>=10\")", s)
			}
		}
	}
	if a := pb.strs("npm", &p.Npm); a != nil {
		for _, s := range p.Npm {
			if !npmSpecRE.MatchString(s) {
				pb.bad(a, "%q is not an npm package (name or name@range, e.g. \"left-pad@^1.3\")", s)
			}
		}
	}
	r.Packages = p
}

// String names the source settings for messages.
func (s PackageSources) String() string {
	var parts []string
	if s.PythonIndex != "" || len(s.FindLinks) > 0 {
		parts = append(parts, fmt.Sprintf("python_index (%s)", s.PythonPos))
	}
	if s.NpmRegistry != "" {
		parts = append(parts, fmt.Sprintf("npm_registry (%s)", s.NpmPos))
	}
	return strings.Join(parts, ", ")
}
