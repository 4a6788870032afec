package policy

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// The decoder works on hcl's low-level Body/Content API rather than gohcl
// struct tags because every setting needs its own position for messages and
// most need more than a type check (sizes, durations, globs, octal modes).
// It keeps going after a problem so that one pass reports all of them.

func attrs(names ...string) []hcl.AttributeSchema {
	out := make([]hcl.AttributeSchema, len(names))
	for i, n := range names {
		out[i] = hcl.AttributeSchema{Name: n}
	}
	return out
}

var (
	topSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "daemon"}, {Type: "skills"}, {Type: "images"}, {Type: "limits"}, {Type: "audit"}, {Type: "pool"}, {Type: "sessions"},
		{Type: "egress"}, {Type: "secret", LabelNames: []string{"name"}},
		{Type: "runtime", LabelNames: []string{"name"}},
		{Type: "image", LabelNames: []string{"name"}},
		{Type: "policy", LabelNames: []string{"name"}},
		{Type: "python_index"}, {Type: "npm_registry"}, {Type: "dependencies"},
		{Type: "agent", LabelNames: []string{"name"}},
		{Type: "store", LabelNames: []string{"name"}},
	}}
	daemonSchema = &hcl.BodySchema{Attributes: attrs("socket", "socket_mode", "socket_group",
		"state_dir", "audit_dir", "approvers", "max_connections", "max_concurrent_runs",
		"max_active_skills", "run_queue_timeout", "idle_timeout", "max_line_bytes",
		"confirmation_ttl", "runtime", "tool_mode", "max_connections_per_uid", "max_runs_per_uid",
		"max_queued_runs_per_uid", "max_request_bytes_per_uid", "approver_connections", "approver_runs",
		"workspace_quota", "workspace_quota_per_uid", "workspace_quota_total", "replica", "store", "metrics", "traces", "traces_sample")}
	skillsSchema = &hcl.BodySchema{Attributes: attrs("roots", "allow_extensions",
		"catalog_budget", "max_depth", "max_skills", "max_read_bytes", "catalog_budget_tokens", "lock_file")}
	runtimeSchema = &hcl.BodySchema{Attributes: attrs("binary", "state_dir", "platform", "flags",
		"address", "namespace", "handler", "kubeconfig", "egress_address", "egress_netns", "registry",
		"data_path", "agent_binary", "cpu_request")}
	imagesSchema = &hcl.BodySchema{Attributes: attrs("dir", "recipes_dirs", "build_on_demand")}
	imageSchema  = &hcl.BodySchema{Attributes: attrs("extensions", "interpreter", "shebangs", "recipe", "ref")}
	limitsSchema = &hcl.BodySchema{Attributes: attrs(limitKeys()...)}
	poolSchema   = &hcl.BodySchema{Attributes: attrs("per_key", "total", "idle_timeout", "memory_budget")}
	auditSchema  = &hcl.BodySchema{Attributes: attrs("rotate_bytes", "rotate_size", "rotate_age",
		"checkpoint_key", "checkpoint_interval", "min_free", "reads_per_interval", "aggregate_interval")}
	policySchema = &hcl.BodySchema{
		Attributes: attrs("skills", "tools", "deny", "confirm", "network", "script_dirs", "env", "require_lock", "hook_failure", "hook_timeout", "build_from_source", "egress",
			"workspace", "workspace_paths", "workspace_delete", "workspace_excludes", "isolation"),
		Blocks: []hcl.BlockHeaderSchema{{Type: "limits"}, {Type: "packages"}},
	}
)

var (
	labelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	// dnsLabelRE is a DNS-1123 label: a Kubernetes namespace.
	dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	runscPlat  = []string{"systrap", "ptrace", "kvm"}
)

type decoder struct {
	file, dir string
	cfg       *Config
	problems  []Problem
}

func (d *decoder) pos(r hcl.Range) Pos { return Pos{File: d.file, Line: r.Start.Line} }

func (d *decoder) errorf(r hcl.Range, field, format string, args ...any) {
	d.problems = append(d.problems, Problem{
		File: d.file, Line: r.Start.Line, Column: r.Start.Column,
		Field: field, Message: fmt.Sprintf(format, args...),
	})
}

// diags records hcl's own diagnostics; it reports whether any was an error.
func (d *decoder) diags(field string, ds hcl.Diagnostics) bool {
	bad := false
	for _, dg := range ds {
		if dg.Severity != hcl.DiagError {
			continue
		}
		bad = true
		msg := dg.Summary
		if dg.Detail != "" {
			msg += ": " + dg.Detail
		}
		p := Problem{File: d.file, Field: field, Message: msg}
		if dg.Subject != nil {
			p.Line, p.Column = dg.Subject.Start.Line, dg.Subject.Start.Column
		}
		d.problems = append(d.problems, p)
	}
	return bad
}

// resolve makes a relative path relative to the config file's directory.
func (d *decoder) resolve(p string) string {
	if p == "" || filepath.IsAbs(p) || d.dir == "" {
		return p
	}
	return filepath.Join(d.dir, p)
}

func (d *decoder) decodeFile(src []byte) {
	p := hclparse.NewParser()
	var f *hcl.File
	var ds hcl.Diagnostics
	if strings.HasSuffix(d.file, ".json") {
		f, ds = p.ParseJSON(src, d.file)
	} else {
		f, ds = p.ParseHCL(src, d.file)
	}
	if d.diags("", ds) || f == nil {
		return
	}
	content, ds := f.Body.Content(topSchema)
	d.diags("", ds)

	seen := map[string]*hcl.Block{}
	once := func(b *hcl.Block, key, what string) bool {
		if prev := seen[key]; prev != nil {
			d.errorf(b.DefRange, what, "declared twice (first at line %d); merge the two blocks", prev.DefRange.Start.Line)
			return false
		}
		seen[key] = b
		return true
	}
	for _, b := range content.Blocks {
		switch b.Type {
		case "daemon":
			if once(b, "daemon", "daemon") {
				d.daemon(b)
			}
		case "skills":
			if once(b, "skills", "skills") {
				d.skills(b)
			}
		case "images":
			if once(b, "images", "images") {
				d.images(b)
			}
		case "limits":
			if once(b, "limits", "limits") {
				lim, pos := d.limits(b, "limits")
				// Fields the file sets replace the defaults (they may raise them).
				d.cfg.Limits = lim.WithDefaults()
				d.cfg.LimitsPos = pos
			}
		case "audit":
			if once(b, "audit", "audit") {
				d.audit(b)
			}
		case "pool":
			if once(b, "pool", "pool") {
				d.pool(b)
			}
		case "sessions":
			if once(b, "sessions", "sessions") {
				d.sessions(b)
			}
		case "egress":
			if once(b, "egress", "egress") {
				d.egress(b)
			}
		case "secret":
			d.secret(b)
		case "runtime":
			if once(b, "runtime."+b.Labels[0], fmt.Sprintf("runtime %q", b.Labels[0])) {
				d.runtime(b)
			}
		case "image":
			if once(b, "image."+b.Labels[0], fmt.Sprintf("image %q", b.Labels[0])) {
				d.image(b)
			}
		case "policy":
			if once(b, "policy."+b.Labels[0], fmt.Sprintf("policy %q", b.Labels[0])) {
				d.policy(b)
			}
		case "python_index", "npm_registry", "dependencies":
			if once(b, b.Type, b.Type) {
				map[string]func(*hcl.Block){"python_index": d.pythonIndex, "npm_registry": d.npmRegistry, "dependencies": d.dependencies}[b.Type](b)
			}
		case "agent":
			if once(b, "agent."+b.Labels[0], fmt.Sprintf("agent %q", b.Labels[0])) {
				d.agent(b)
			}
		case "store":
			if once(b, "store."+b.Labels[0], fmt.Sprintf("store %q", b.Labels[0])) {
				d.store(b)
			}
		}
	}
	if b := seen["daemon"]; b != nil {
		d.checkStore(b.DefRange)
	}
	d.checkExtensions()
}
