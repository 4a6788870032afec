package policy

import (
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Isolation is how long a skill's sandbox lives. A fresh
// sandbox per run is the default because it shares nothing between runs;
// a session sandbox keeps processes, /tmp and memory from one run of a
// session to the next, so a rule must ask for it.
type Isolation string

const (
	// IsolationRun: a fresh sandbox for every run, gone when it ends.
	IsolationRun Isolation = "run"
	// IsolationSession: one long-lived sandbox per (session, image),
	// checkpointed to disk when idle and restored on the session's next
	// call.
	IsolationSession Isolation = "session"
)

// isolations are the values a rule's isolation may take.
var isolations = []string{string(IsolationRun), string(IsolationSession)}

// RuleIsolationDefault names the default no rule set.
const RuleIsolationDefault = `default: no matching rule sets isolation = "session"`

// IsolationFor returns how runs of skill are isolated: session only if a
// matching rule sets isolation = "session" and none sets "run" (the
// stricter, as network on needs every rule's yes). The string names the
// deciding rule. It is For(skill).Isolation, for callers that ask nothing
// else.
func (c *Config) IsolationFor(skill string) (Isolation, string) {
	i := c.For(skill).Isolation
	return i.Value, i.Rule
}

// SessionConfig is the sessions {} block: what session sandboxes
// (isolation = "session") may hold of the daemon.
type SessionConfig struct {
	// IdleTimeout: an idle session sandbox is checkpointed to disk after
	// this and its memory freed; 0 keeps it running until the session
	// ends.
	IdleTimeout time.Duration
	// CheckpointBudget is the disk all checkpoints together may use
	// (images and workspace copies).
	CheckpointBudget int64
	// CheckpointBudgetPerSession and CheckpointBudgetPerUID bound the
	// checkpoints of one session and of one uid's sessions (0: only the
	// total bounds them).
	CheckpointBudgetPerSession int64
	CheckpointBudgetPerUID     int64
	// CheckpointDiskPercent is the share of the checkpoint store's
	// filesystem all checkpoints may take, in percent (0: no share
	// kept). Apart from it, no checkpoint takes the filesystem below the
	// audit's min_free.
	CheckpointDiskPercent int
	// MaxSandboxes is how many session sandboxes may be live at once on
	// this daemon.
	MaxSandboxes int
	// BackgroundRuns is how many background runs one session may have
	// live at once.
	BackgroundRuns int
	Pos            Pos
}

// DefaultSessionConfig is the sessions {} block's defaults.
var DefaultSessionConfig = SessionConfig{
	IdleTimeout:                10 * time.Minute,
	CheckpointBudget:           4 << 30,
	CheckpointBudgetPerSession: 2 << 30,
	CheckpointBudgetPerUID:     2 << 30,
	CheckpointDiskPercent:      50,
	MaxSandboxes:               16,
	BackgroundRuns:             8,
}

var sessionsSchema = &hcl.BodySchema{Attributes: attrs("idle_timeout", "checkpoint_budget", "checkpoint_budget_per_session",
	"checkpoint_budget_per_uid", "checkpoint_disk_percent", "max_sandboxes", "background_runs")}

func (d *decoder) sessions(blk *hcl.Block) {
	sc := &d.cfg.Sessions
	sc.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, "sessions", sessionsSchema)
	if v, a := b.value("idle_timeout"); a != nil {
		// "0" (or 0) turns checkpointing off; any other value is a
		// duration greater than 0.
		if zero := (v.Type() == cty.Number && v.AsBigFloat().Sign() == 0) ||
			(v.Type() == cty.String && strings.TrimSpace(v.AsString()) == "0"); zero {
			sc.IdleTimeout = 0
		} else {
			b.duration("idle_timeout", &sc.IdleTimeout)
		}
	}
	b.size("checkpoint_budget", &sc.CheckpointBudget)
	b.size("checkpoint_budget_per_session", &sc.CheckpointBudgetPerSession)
	b.size("checkpoint_budget_per_uid", &sc.CheckpointBudgetPerUID)
	var pct int64
	if a := b.integer("checkpoint_disk_percent", 0, &pct); a != nil {
		if pct > 100 {
			b.bad(a, "is %d, but it is a percent of the checkpoint store's filesystem: 0 (no share kept) to 100", pct)
		} else {
			sc.CheckpointDiskPercent = int(pct)
		}
	}
	b.intField("max_sandboxes", 1, &sc.MaxSandboxes)
	b.intField("background_runs", 0, &sc.BackgroundRuns)
}

// isolationRule decodes a rule's isolation attribute.
func (b *body) isolationRule(r *Rule) {
	var s string
	if a := b.str("isolation", &s); a != nil {
		for _, v := range isolations {
			if s == v {
				r.Isolation = Isolation(s)
				return
			}
		}
		// The problem's field names the rule (policy "NAME".isolation).
		b.bad(a, "unknown value %q: choose one of %s (\"run\": a fresh sandbox per run, the default; \"session\": one sandbox kept for the session)",
			s, strings.Join(isolations, ", "))
	}
}
