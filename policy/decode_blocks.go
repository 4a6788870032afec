package policy

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/hashicorp/hcl/v2"
	"github.com/skillbox/skillbox/policy/replicaname"
	"github.com/skillbox/skillbox/runtime"
	"github.com/zclconf/go-cty/cty"
)

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
	if only("data_path", "kubernetes") {
		b.str("data_path", &rc.DataPath) // checked by the runtime (kubernetes.DecodeOptions)
	}
	if only("cpu_request", "kubernetes") {
		b.str("cpu_request", &rc.CPURequest) // checked by the runtime (kubernetes.DecodeOptions)
	}
	if only("agent_binary", "kubernetes") {
		b.path("agent_binary", &rc.AgentBinary)
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
