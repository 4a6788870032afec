package policy

import (
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/skillbox/skillbox/policy/replicaname"
	"github.com/skillbox/skillbox/runtime"
	"github.com/zclconf/go-cty/cty"
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
		"address", "namespace", "handler", "kubeconfig", "egress_address", "egress_netns", "registry")}
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

// body is one block's attributes with typed accessors that record problems.
type body struct {
	d      *decoder
	prefix string
	attrs  hcl.Attributes
}

func (d *decoder) body(b hcl.Body, prefix string, schema *hcl.BodySchema) (*body, hcl.Blocks) {
	content, ds := b.Content(schema)
	d.diags(prefix, ds)
	if content == nil {
		return &body{d: d, prefix: prefix}, nil
	}
	return &body{d: d, prefix: prefix, attrs: content.Attributes}, content.Blocks
}

func (b *body) field(name string) string {
	if b.prefix == "" {
		return name
	}
	return b.prefix + "." + name
}

func (b *body) bad(a *hcl.Attribute, format string, args ...any) {
	b.d.errorf(a.Expr.Range(), b.field(a.Name), format, args...)
}

// value evaluates an attribute with no variables or functions.
func (b *body) value(name string) (cty.Value, *hcl.Attribute) {
	a := b.attrs[name]
	if a == nil {
		return cty.NilVal, nil
	}
	v, ds := a.Expr.Value(nil)
	if b.d.diags(b.field(name), ds) {
		return cty.NilVal, nil
	}
	if v.IsNull() {
		b.bad(a, "must not be null")
		return cty.NilVal, nil
	}
	return v, a
}

func (b *body) str(name string, dst *string) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.String {
		b.bad(a, "must be a string, not %s", v.Type().FriendlyName())
		return nil
	}
	*dst = v.AsString()
	return a
}

func (b *body) strs(name string, dst *[]string) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	t := v.Type()
	if !t.IsTupleType() && !t.IsListType() && !t.IsSetType() {
		b.bad(a, "must be a list of strings, like [\"a\", \"b\"], not %s", t.FriendlyName())
		return nil
	}
	out := []string{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() || e.Type() != cty.String {
			b.bad(a, "must be a list of strings; element %d is %s", len(out)+1, e.Type().FriendlyName())
			return nil
		}
		out = append(out, e.AsString())
	}
	*dst = out
	return a
}

func (b *body) boolean(name string, dst *bool) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.Bool {
		b.bad(a, "must be true or false, not %s", v.Type().FriendlyName())
		return nil
	}
	*dst = v.True()
	return a
}

// integer reads a whole number that must be at least min.
func (b *body) integer(name string, min int64, dst *int64) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.Number {
		b.bad(a, "must be a whole number, not %s", v.Type().FriendlyName())
		return nil
	}
	bf := v.AsBigFloat()
	n, acc := bf.Int64()
	if !bf.IsInt() || acc != 0 {
		b.bad(a, "must be a whole number, not %s", bf.Text('g', -1))
		return nil
	}
	if n < min {
		b.bad(a, "must be at least %d, not %d", min, n)
		return nil
	}
	*dst = n
	return a
}

func (b *body) intField(name string, min int64, dst *int) {
	var n int64
	if b.integer(name, min, &n) != nil {
		*dst = int(n)
	}
}

func (b *body) float(name string, dst *float64) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.Number {
		b.bad(a, "must be a number, not %s", v.Type().FriendlyName())
		return nil
	}
	f, _ := v.AsBigFloat().Float64()
	if f <= 0 {
		b.bad(a, "must be greater than 0")
		return nil
	}
	*dst = f
	return a
}

// size reads a positive byte size given as a string with a unit or a number.
func (b *body) size(name string, dst *int64) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	var s string
	switch v.Type() {
	case cty.String:
		s = v.AsString()
	case cty.Number:
		s = v.AsBigFloat().Text('f', -1)
	default:
		b.bad(a, "must be a size like \"512MiB\" or a number of bytes, not %s", v.Type().FriendlyName())
		return nil
	}
	n, err := ParseSize(s)
	if err != nil {
		b.bad(a, "%v", err)
		return nil
	}
	if n <= 0 {
		b.bad(a, "must be greater than 0 bytes")
		return nil
	}
	*dst = n
	return a
}

// duration reads a positive Go duration string.
func (b *body) duration(name string, dst *time.Duration) *hcl.Attribute {
	v, a := b.value(name)
	if a == nil {
		return nil
	}
	if v.Type() != cty.String {
		b.bad(a, "must be a duration string like \"30s\" or \"5m\", not %s", v.Type().FriendlyName())
		return nil
	}
	dur, err := parseDuration(v.AsString())
	if err != nil {
		b.bad(a, "%v", err)
		return nil
	}
	if dur <= 0 {
		b.bad(a, "must be greater than 0")
		return nil
	}
	*dst = dur
	return a
}

// path reads a non-empty path, resolved against the config's directory.
func (b *body) path(name string, dst *string) *hcl.Attribute {
	var s string
	a := b.str(name, &s)
	if a == nil {
		return nil
	}
	if s == "" {
		b.bad(a, "must not be empty")
		return nil
	}
	*dst = b.d.resolve(s)
	return a
}

func (b *body) paths(name string, dst *[]string) *hcl.Attribute {
	var ss []string
	a := b.strs(name, &ss)
	if a == nil {
		return nil
	}
	for i, s := range ss {
		if s == "" {
			b.bad(a, "element %d is empty", i+1)
			return nil
		}
		ss[i] = b.d.resolve(s)
	}
	*dst = ss
	return a
}

func (b *body) oneOf(name string, dst *string, choices ...string) *hcl.Attribute {
	var s string
	a := b.str(name, &s)
	if a == nil {
		return nil
	}
	for _, c := range choices {
		if s == c {
			*dst = s
			return a
		}
	}
	b.bad(a, "unknown value %q: choose one of %s", s, strings.Join(choices, ", "))
	return nil
}

func (d *decoder) daemon(blk *hcl.Block) {
	dc := &d.cfg.Daemon
	dc.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, "daemon", daemonSchema)
	if a := b.path("socket", &dc.Socket); a != nil {
		if len(dc.Socket) > 107 {
			b.bad(a, "path is %d bytes, longer than a Unix socket allows (107); pick a shorter one", len(dc.Socket))
		}
	}
	if v, a := b.value("socket_mode"); a != nil {
		if v.Type() != cty.String {
			b.bad(a, "must be a quoted octal string like \"0660\" (a bare number would be read as decimal)")
		} else if m, err := parseMode(v.AsString()); err != nil {
			b.bad(a, "%v", err)
		} else {
			dc.SocketMode = fs.FileMode(m)
		}
	}
	if a := b.str("socket_group", &dc.SocketGroup); a != nil && (dc.SocketGroup == "" || strings.ContainsAny(dc.SocketGroup, " \t:")) {
		b.bad(a, "invalid group %q: use a group name or gid", dc.SocketGroup)
	}
	b.path("state_dir", &dc.StateDir)
	b.path("audit_dir", &dc.AuditDir)
	if a := b.str("replica", &dc.Replica); a != nil {
		if err := replicaname.Check(dc.Replica); err != nil {
			b.bad(a, "%v", err)
		}
	}
	var appr []string
	if a := b.strs("approvers", &appr); a != nil {
		ok := true
		for _, u := range appr {
			if u == "" || strings.ContainsAny(u, " \t:") {
				b.bad(a, "invalid approver %q: use a user name or a numeric uid", u)
				ok = false
			}
		}
		if ok {
			dc.Approvers = appr
		}
	}
	b.intField("max_connections", 1, &dc.MaxConnections)
	b.intField("max_concurrent_runs", 1, &dc.MaxConcurrentRuns)
	b.intField("max_active_skills", 1, &dc.MaxActiveSkills)
	b.duration("run_queue_timeout", &dc.RunQueueTimeout)
	b.duration("idle_timeout", &dc.IdleTimeout)
	var line int64
	if b.size("max_line_bytes", &line) != nil {
		dc.MaxLineBytes = int(line)
	}
	b.duration("confirmation_ttl", &dc.ConfirmationTTL)
	b.intField("max_connections_per_uid", 1, &dc.MaxConnectionsPerUID)
	b.intField("max_runs_per_uid", 1, &dc.MaxRunsPerUID)
	b.intField("max_queued_runs_per_uid", 0, &dc.MaxQueuedRunsPerUID)
	b.size("max_request_bytes_per_uid", &dc.MaxRequestBytesPerUID)
	b.size("workspace_quota", &dc.WorkspaceQuota)
	b.size("workspace_quota_per_uid", &dc.WorkspaceQuotaPerUID)
	b.size("workspace_quota_total", &dc.WorkspaceQuotaTotal)
	b.intField("approver_connections", 0, &dc.ApproverConnections)
	b.intField("approver_runs", 0, &dc.ApproverRuns)
	if dc.ApproverConnections >= dc.MaxConnections {
		d.errorf(blk.DefRange, "daemon.approver_connections", "is %d, which leaves none of the %d max_connections for other users; keep it below max_connections", dc.ApproverConnections, dc.MaxConnections)
	}
	if dc.ApproverRuns >= dc.MaxConcurrentRuns && dc.ApproverRuns > 0 {
		// One slot in all: approvers and everyone else share it.
		dc.ApproverRuns = dc.MaxConcurrentRuns - 1
	}
	b.oneOf("runtime", &dc.Runtime, runtimeNames...)
	b.oneOf("store", &dc.Store, storeNames...)
	var metrics string
	if a := b.str("metrics", &metrics); a != nil {
		if m, err := ParseMetricsAddress(metrics); err != nil {
			b.bad(a, "%v", err)
		} else {
			dc.Metrics = m
		}
	}
	var traces string
	if a := b.str("traces", &traces); a != nil {
		if t, err := ParseTracesEndpoint(traces); err != nil {
			b.bad(a, "%v", err)
		} else {
			dc.Traces = t
		}
	}
	if a := b.float("traces_sample", &dc.TracesSample); a != nil {
		switch {
		case dc.TracesSample > 1:
			b.bad(a, "is %g: it is the share of calls traced, from 0 (exclusive) to 1 (every call)", dc.TracesSample)
		case !dc.Traces.Enabled():
			b.bad(a, "is set but daemon.traces is not: set traces to a collector's URL, or drop traces_sample")
		}
	}
	var mode2 string
	if b.oneOf("tool_mode", &mode2, string(ToolModeRestrict), string(ToolModePreapprove)) != nil {
		dc.ToolMode = ToolMode(mode2)
	}
}

func (d *decoder) skills(blk *hcl.Block) {
	sc := &d.cfg.Skills
	sc.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, "skills", skillsSchema)
	b.paths("roots", &sc.Roots)
	b.boolean("allow_extensions", &sc.AllowExtensions)
	b.intField("catalog_budget", 1, &sc.CatalogBudget)
	b.intField("max_depth", 1, &sc.MaxDepth)
	b.intField("max_skills", 1, &sc.MaxSkills)
	b.size("max_read_bytes", &sc.MaxReadBytes)
	b.intField("catalog_budget_tokens", 1, &sc.CatalogBudgetTokens)
	b.path("lock_file", &sc.LockFile)
}

func (d *decoder) runtime(blk *hcl.Block) {
	name := blk.Labels[0]
	prefix := fmt.Sprintf("runtime %q", name)
	rc := d.cfg.Runtimes[name]
	if rc == nil {
		d.errorf(blk.LabelRanges[0], prefix, "unknown runtime: choose one of %s", strings.Join(runtimeNames, ", "))
		return
	}
	rc.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, prefix, runtimeSchema)
	only := func(attr string, runtimes ...string) bool {
		a := b.attrs[attr]
		if a == nil {
			return false
		}
		for _, r := range runtimes {
			if r == name {
				return true
			}
		}
		b.d.errorf(a.NameRange, b.field(attr), "not used by runtime %q (only by %s)", name, strings.Join(runtimes, ", "))
		return false
	}
	if only("binary", "runsc", "runc", "containerd") {
		if a := b.str("binary", &rc.Binary); a != nil {
			if rc.Binary == "" {
				b.bad(a, "must not be empty")
			} else if strings.Contains(rc.Binary, "/") {
				rc.Binary = d.resolve(rc.Binary)
			}
		}
	}
	b.path("state_dir", &rc.StateDir)
	if only("platform", "runsc", "containerd") {
		b.oneOf("platform", &rc.Platform, runscPlat...)
	}
	var flags []string
	if only("flags", "runsc", "runc", "containerd") && b.strs("flags", &flags) != nil {
		ok := true
		for _, f := range flags {
			if !strings.HasPrefix(f, "-") {
				b.bad(b.attrs["flags"], "flag %q must start with \"-\" (write \"--name=value\" as one element)", f)
				ok = false
			}
		}
		if ok {
			rc.Flags = flags
		}
	}
	if only("handler", "containerd") {
		b.oneOf("handler", &rc.Handler, runtime.ContainerdHandlers...)
	}
	if only("address", "containerd") {
		b.path("address", &rc.Address)
	}
	if only("namespace", "containerd", "kubernetes") {
		re, what := labelRE, ""
		if name == "kubernetes" {
			re, what = dnsLabelRE, ": a Kubernetes namespace is lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit"
		}
		if a := b.str("namespace", &rc.Namespace); a != nil && !re.MatchString(rc.Namespace) {
			b.bad(a, "invalid namespace %q%s", rc.Namespace, what)
		}
	}
	if only("kubeconfig", "kubernetes") {
		b.path("kubeconfig", &rc.Kubeconfig)
	}
	if only("egress_address", "kubernetes") {
		b.str("egress_address", &rc.EgressAddress) // checked by the backend
	}
	if only("egress_netns", "kubernetes") {
		b.path("egress_netns", &rc.EgressNetNS)
	}
	if only("registry", "kubernetes") {
		b.str("registry", &rc.Registry) // checked by the runtime (kubernetes.ParseRegistry)
	}
}

func (d *decoder) images(blk *hcl.Block) {
	ic := &d.cfg.Images
	ic.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, "images", imagesSchema)
	b.path("dir", &ic.Dir)
	b.paths("recipes_dirs", &ic.RecipesDirs)
	b.boolean("build_on_demand", &ic.BuildOnDemand)
}

// label is a labelled block's name and the prefix of its problems (kind
// "NAME"); a name that is not a valid label is a problem and ok is false.
func (d *decoder) label(blk *hcl.Block, kind, noun string) (name, prefix string, ok bool) {
	name = blk.Labels[0]
	prefix = fmt.Sprintf("%s %q", kind, name)
	if !labelRE.MatchString(name) {
		d.errorf(blk.LabelRanges[0], prefix, "invalid %s name: use letters, digits, '_', '.', '-'", noun)
		return name, prefix, false
	}
	return name, prefix, true
}

func (d *decoder) image(blk *hcl.Block) {
	name, prefix, ok := d.label(blk, "image", "image")
	if !ok {
		return
	}
	im := d.cfg.Image(name)
	builtin := im != nil
	if !builtin {
		im = &Image{Name: name, Recipe: name}
		d.cfg.Images.List = append(d.cfg.Images.List, im)
	}
	im.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, prefix, imageSchema)

	var exts []string
	if a := b.strs("extensions", &exts); a != nil {
		ok := true
		for i, e := range exts {
			e = strings.ToLower(e)
			exts[i] = e
			if len(e) < 2 || e[0] != '.' || strings.ContainsAny(e[1:], "./\\ \t*?") {
				b.bad(a, "invalid extension %q: write it with its dot, like \".py\"", e)
				ok = false
			}
		}
		if ok {
			im.Extensions = exts
		}
	}
	var argv []string
	if a := b.strs("interpreter", &argv); a != nil {
		if len(argv) == 0 || argv[0] == "" {
			b.bad(a, "must name the interpreter binary first, like [\"python3\"]")
		} else {
			im.Interpreter = argv
		}
	} else if !builtin && b.attrs["interpreter"] == nil {
		d.errorf(blk.DefRange, b.field("interpreter"), "is required for a new image, like interpreter = [\"ruby\"]")
	}
	var sb []string
	if a := b.strs("shebangs", &sb); a != nil {
		ok := true
		for _, s := range sb {
			if s == "" || strings.ContainsAny(s, "/ \t") {
				b.bad(a, "invalid interpreter name %q: give a binary's base name, like \"python3\"", s)
				ok = false
			}
		}
		if ok {
			im.Shebangs = sb
		}
	} else if !builtin && len(im.Interpreter) > 0 {
		im.Shebangs = []string{path.Base(im.Interpreter[0])}
	}
	recipe := b.str("recipe", &im.Recipe)
	if recipe != nil && !labelRE.MatchString(im.Recipe) {
		b.bad(recipe, "invalid recipe name %q", im.Recipe)
	}
	if a := b.str("ref", &im.Ref); a != nil {
		switch {
		case recipe != nil:
			b.bad(a, "an image is built from a recipe or pulled from a registry, not both: drop recipe or ref")
		case im.Ref == "":
			b.bad(a, "must name a registry image, like \"registry.example.com/team/python:3.13\"")
		default:
			if _, err := reference.ParseDockerRef(im.Ref); err != nil {
				b.bad(a, "invalid registry reference %q: %v", im.Ref, err)
			}
			im.Recipe = ""
		}
	}
}

// checkExtensions makes sure every extension picks exactly one image.
func (d *decoder) checkExtensions() {
	owner := map[string]*Image{}
	for _, im := range d.cfg.Images.List {
		for _, e := range im.Extensions {
			if prev := owner[e]; prev != nil {
				// Report on the one declared in the file (the later one if both are).
				at, other := im, prev
				if im.Pos.Line == 0 || (prev.Pos.Line > im.Pos.Line) {
					at, other = prev, im
				}
				d.problems = append(d.problems, Problem{
					File: d.file, Line: at.Pos.Line,
					Field:   fmt.Sprintf("image %q.extensions", at.Name),
					Message: fmt.Sprintf("extension %q is also mapped by %s; an extension must pick one image (override that image's extensions to move it)", e, other.Rule()),
				})
				continue
			}
			owner[e] = im
		}
	}
}

// limits decodes a limits {} block; fields not written stay zero.
func (d *decoder) limits(blk *hcl.Block, prefix string) (runtime.Limits, Pos) {
	var l runtime.Limits
	b, _ := d.body(blk.Body, prefix, limitsSchema)
	for _, f := range runtime.LimitFields {
		switch p := f.Ptr(&l).(type) {
		case *time.Duration:
			b.duration(f.HCL, p)
		case *float64:
			b.float(f.HCL, p)
		case *int64:
			if f.Kind == runtime.LimitCount {
				b.integer(f.HCL, 1, p)
			} else {
				b.size(f.HCL, p)
			}
		case *int:
			b.intField(f.HCL, 1, p)
		default:
			panic(fmt.Sprintf("policy: limit %s has no decoder for %T", f.HCL, p))
		}
	}
	return l, d.pos(blk.DefRange)
}

// limitKeys are the attributes of a limits {} block.
func limitKeys() []string {
	keys := make([]string, len(runtime.LimitFields))
	for i, f := range runtime.LimitFields {
		keys[i] = f.HCL
	}
	return keys
}

func (d *decoder) audit(blk *hcl.Block) {
	ac := &d.cfg.Audit
	ac.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, "audit", auditSchema)
	if b.attrs["rotate_bytes"] != nil && b.attrs["rotate_size"] != nil {
		d.errorf(b.attrs["rotate_size"].NameRange, "audit.rotate_size", "is another name for rotate_bytes; set only one")
	}
	b.size("rotate_bytes", &ac.RotateBytes)
	b.size("rotate_size", &ac.RotateBytes)
	b.duration("rotate_age", &ac.RotateAge)
	b.path("checkpoint_key", &ac.CheckpointKey)
	b.duration("checkpoint_interval", &ac.CheckpointInterval)
	if v, a := b.value("min_free"); a != nil {
		if v.Type() == cty.Number && v.AsBigFloat().Sign() == 0 {
			ac.MinFree = 0
		} else {
			b.size("min_free", &ac.MinFree)
		}
	}
	b.intField("reads_per_interval", 1, &ac.ReadsPerInterval)
	b.duration("aggregate_interval", &ac.AggregateInterval)
}

func (d *decoder) pool(blk *hcl.Block) {
	pc := &d.cfg.Pool
	pc.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, "pool", poolSchema)
	b.intField("per_key", 0, &pc.PerKey)
	b.intField("total", 0, &pc.Total)
	b.duration("idle_timeout", &pc.IdleTimeout)
	b.size("memory_budget", &pc.MemoryBudget)
	if pc.PerKey > 0 && pc.Total > 0 && pc.Total < pc.PerKey {
		if a := b.attrs["total"]; a != nil {
			b.bad(a, "is smaller than per_key (%d): raise it or lower per_key", pc.PerKey)
		}
	}
}

func (d *decoder) policy(blk *hcl.Block) {
	name, prefix, ok := d.label(blk, "policy", "rule")
	if !ok {
		return
	}
	r := &Rule{Name: name, Pos: d.pos(blk.DefRange)}
	b, blocks := d.body(blk.Body, prefix, policySchema)

	if a := b.strs("skills", &r.Skills); a != nil {
		if len(r.Skills) == 0 {
			b.bad(a, "must list at least one skill name pattern, like [\"*\"]")
		}
		for _, p := range r.Skills {
			if p == "" {
				b.bad(a, "empty skill pattern")
			} else if _, err := path.Match(p, ""); err != nil {
				b.bad(a, "invalid glob %q: %v", p, err)
			}
		}
	} else if b.attrs["skills"] == nil {
		d.errorf(blk.DefRange, b.field("skills"), "is required: list the skill name patterns this rule applies to, like skills = [\"*\"]")
	}
	list := func(field string, dst *[]string, pats *[]toolPattern, networkOK bool) {
		a := b.strs(field, dst)
		if a == nil {
			return
		}
		for _, s := range *dst {
			if s == NetworkTool || s == WorkspaceTool {
				if !networkOK {
					b.bad(a, "%q is not a tool here: use %s = ... in the rule (and confirm = [%q] to ask first)", s, s, s)
				}
				*pats = append(*pats, toolPattern{raw: s, name: s})
				continue
			}
			p, err := parseToolPattern(s)
			if err != nil {
				b.bad(a, "%v", err)
				continue
			}
			*pats = append(*pats, p)
		}
	}
	list("tools", &r.Tools, &r.tools, false)
	list("deny", &r.Deny, &r.deny, false)
	list("confirm", &r.Confirm, &r.confirm, true)
	var net bool
	if b.boolean("network", &net) != nil {
		r.Network = &net
	}
	b.egressList(r)
	b.workspaceRule(r)
	b.isolationRule(r)
	var dirs []string
	if a := b.strs("script_dirs", &dirs); a != nil {
		ok := true
		for _, dir := range dirs {
			if err := checkScriptDir(dir); err != "" {
				b.bad(a, "%q %s", dir, err)
				ok = false
			}
		}
		if ok && len(dirs) == 0 {
			b.bad(a, "is empty, which would allow no script at all: list directories like [\"scripts\"], or leave script_dirs out to allow any file of the skill")
			ok = false
		}
		if ok {
			r.ScriptDirs = dirs
		}
	}
	var env []string
	if a := b.strs("env", &env); a != nil {
		ok := true
		for _, e := range env {
			if why := runtime.CheckEnvPattern(e); why != "" {
				b.bad(a, "%q %s", e, why)
				ok = false
			}
		}
		if ok {
			r.Env = env
		}
	}
	var pkgs *hcl.Block
	for _, lb := range blocks {
		if lb.Type == "packages" {
			if pkgs != nil {
				d.errorf(lb.DefRange, prefix+".packages", "declared twice (first at line %d); merge the two blocks", pkgs.DefRange.Start.Line)
				continue
			}
			pkgs = lb
		}
	}
	d.rulePackages(r, b, pkgs)
	blocks = slices.DeleteFunc(blocks, func(lb *hcl.Block) bool { return lb.Type == "packages" })
	var lock bool
	if b.boolean("require_lock", &lock) != nil {
		r.RequireLock = &lock
	}
	b.oneOf("hook_failure", &r.HookFailure, HookFailureDeny, HookFailureConfirm, HookFailureIgnore)
	b.duration("hook_timeout", &r.HookTimeout)
	for i, lb := range blocks {
		if i > 0 {
			d.errorf(lb.DefRange, prefix+".limits", "declared twice (first at line %d); merge the two blocks", blocks[0].DefRange.Start.Line)
			continue
		}
		r.Limits, _ = d.limits(lb, prefix+".limits")
	}
	d.cfg.Rules = append(d.cfg.Rules, r)
}
