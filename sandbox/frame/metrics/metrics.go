// Package metrics is the daemon's Prometheus metrics: the collectors, their
// registry (its own, never the global one) and the endpoint that serves
// them. The rest of skillbox does not import Prometheus: it reports through
// small interfaces of its own (audit.AppendObserver for every audit record
// and how long its append took, service.Metrics for a confirmation's wait,
// images.Store.OnBuild for image builds) and the pool and session store are
// read when scraped. The stack wires them together when daemon { metrics =
// "…" } is set; without it nothing is collected.
//
// Labels are bounded: a skill's name is a label, but only the first
// MaxSkills names seen are kept apart, the rest are counted as "_other"; run
// ids, session ids, uids and paths are never labels.
package metrics

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
)

// DefaultMaxSkills is how many skill names are label values of their own.
const DefaultMaxSkills = 100

// Skill label values that are not skill names (skill names have no
// underscore, so these cannot collide with one).
const (
	// SkillOther counts the skills seen after MaxSkills others were.
	SkillOther = "_other"
	// SkillCode counts skills.run_code runs, which run no one skill.
	SkillCode = "_run_code"
)

// Values of the outcome label of skillbox_runs_total.
const (
	RunOK     = "ok"     // the script exited 0
	RunFailed = "failed" // it exited non-zero, or a limit, timeout or cancel stopped it (reason says which)
	RunError  = "error"  // skillbox could not run it (no image, sandbox failure); reason is "none"
)

// Options tune the metrics.
type Options struct {
	// MaxSkills is how many distinct skill names are label values; the
	// rest become SkillOther. 0: DefaultMaxSkills.
	MaxSkills int
}

// Metrics is the daemon's metrics. Its methods may be called from any
// goroutine.
type Metrics struct {
	reg    *prometheus.Registry
	skills skillLabels

	runs           *prometheus.CounterVec
	runSeconds     *prometheus.HistogramVec
	builds         *prometheus.CounterVec
	egressConns    *prometheus.CounterVec
	egressDenied   *prometheus.CounterVec
	confirmSeconds *prometheus.HistogramVec
	auditSeconds   prometheus.Histogram
	auditFailures  prometheus.Counter
	state          *stateCollector
}

var (
	_ audit.AppendObserver = (*Metrics)(nil)
	_ service.Metrics      = (*Metrics)(nil)
)

// New makes the collectors and their registry, with the Go runtime's and
// the process's own collectors beside them.
func New(o Options) *Metrics {
	if o.MaxSkills <= 0 {
		o.MaxSkills = DefaultMaxSkills
	}
	skillHelp := " The skill label is the skill's name for the first " + strconv.Itoa(o.MaxSkills) +
		" skills seen, " + SkillOther + " for the rest and " + SkillCode + " for skills.run_code."
	m := &Metrics{
		reg:    prometheus.NewRegistry(),
		skills: skillLabels{max: o.MaxSkills, seen: map[string]struct{}{}},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skillbox_runs_total",
			Help: "Runs that ended (run_script and run_code), by skill, outcome (ok: exit 0; failed: non-zero exit or stopped, see reason; error: skillbox could not run it) and reason (exit, timeout, oom, pids, output_cap, cancelled, killed, ...; none for error)." + skillHelp,
		}, []string{"skill", "outcome", "reason"}),
		runSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "skillbox_run_duration_seconds",
			Help:    "Time from a run's start record to its end (image, sandbox boot or pool claim, the script, outputs), by skill and start: warm (a pre-booted sandbox), cold, or session (the session's own sandbox, isolation = \"session\")." + skillHelp,
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"skill", "start"}),
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skillbox_builds_total",
			Help: "Builds the daemon ran, by kind (image: an interpreter image built on demand; layer: a skill's dependency layer) and outcome (ok, error, refused: a layer the package policy refused).",
		}, []string{"kind", "outcome"}),
		egressConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skillbox_egress_connections_total",
			Help: "Connections runs made through their egress proxy, by skill, counted when the run ends." + skillHelp,
		}, []string{"skill"}),
		egressDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skillbox_egress_denials_total",
			Help: "Egress attempts (connections and names) the proxy refused, by skill, counted when the run ends." + skillHelp,
		}, []string{"skill"}),
		confirmSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "skillbox_confirmation_wait_seconds",
			Help:    "Time from a confirmation's request to an approver's decision, by decision (approved, denied).",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400},
		}, []string{"decision"}),
		auditSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "skillbox_audit_append_duration_seconds",
			Help:    "Time to append (and fsync) one audit record, failed appends included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms .. ~4s
		}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skillbox_audit_append_failures_total",
			Help: "Audit appends that failed; while the log cannot be written, audited calls and runs are refused.",
		}),
		state: &stateCollector{},
	}
	m.reg.MustRegister(m.runs, m.runSeconds, m.builds, m.egressConns, m.egressDenied,
		m.confirmSeconds, m.auditSeconds, m.auditFailures, m.state,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry the endpoint serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Appended implements audit.AppendObserver: it times the append, and
// counts runs, egress and layer builds from their records.
func (m *Metrics) Appended(r *audit.Record, took time.Duration, err error) {
	m.auditSeconds.Observe(took.Seconds())
	if err != nil {
		m.auditFailures.Inc()
	}
	switch r.Event {
	case audit.EventRunEnd:
		m.runEnded(r)
	case runner.EventDepsBuild:
		m.builds.WithLabelValues("layer", buildOutcome(r.Outcome)).Inc()
	}
}

// runEnded counts one run.end record.
func (m *Metrics) runEnded(r *audit.Record) {
	skill := SkillCode
	if r.Skill != nil {
		skill = m.skills.label(r.Skill.Name)
	}
	outcome, reason := RunError, "none"
	ri := r.Run
	if ri == nil {
		ri = &audit.RunInfo{}
	}
	if r.Outcome != audit.OutcomeError && ri.Reason != "" {
		reason, outcome = ri.Reason, RunFailed
		if ri.Reason == string(runtime.ReasonExit) && ri.ExitCode != nil && *ri.ExitCode == 0 {
			outcome = RunOK
		}
	}
	m.runs.WithLabelValues(skill, outcome, reason).Inc()
	start := "cold"
	switch {
	case ri.Isolation == string(policy.IsolationSession):
		start = "session"
	case ri.Warm:
		start = "warm"
	}
	took := time.Duration(ri.DurationMS) * time.Millisecond
	if !ri.Started.IsZero() && ri.Ended.After(ri.Started) {
		took = ri.Ended.Sub(ri.Started)
	}
	m.runSeconds.WithLabelValues(skill, start).Observe(took.Seconds())
	if es := ri.EgressStats; es != nil {
		m.egressConns.WithLabelValues(skill).Add(float64(es.Connections))
		m.egressDenied.WithLabelValues(skill).Add(float64(es.Denied))
	}
}

// buildOutcome keeps the outcome label to ok, refused and error.
func buildOutcome(o string) string {
	switch o {
	case audit.OutcomeOK, audit.OutcomeRefused:
		return o
	}
	return audit.OutcomeError
}

// ImageBuilt counts an image build (images.Store.OnBuild).
func (m *Metrics) ImageBuilt(_ string, err error) {
	outcome := audit.OutcomeOK
	if err != nil {
		outcome = audit.OutcomeError
	}
	m.builds.WithLabelValues("image", outcome).Inc()
}

// ConfirmationDecided implements service.Metrics.
func (m *Metrics) ConfirmationDecided(c *api.Confirmation) {
	if c == nil || c.DecidedAt == nil {
		return
	}
	decision := "approved"
	if c.State == api.ConfirmationDenied {
		decision = "denied"
	}
	m.confirmSeconds.WithLabelValues(decision).Observe(max(c.DecidedAt.Sub(c.Created), 0).Seconds())
}

// WatchPool makes every scrape read the warm pool's counts.
func (m *Metrics) WatchPool(stats func() runtime.PoolStats) {
	m.state.mu.Lock()
	m.state.pool = stats
	m.state.mu.Unlock()
}

// WatchSessions makes every scrape count the open sessions.
func (m *Metrics) WatchSessions(count func() (int, error)) {
	m.state.mu.Lock()
	m.state.sessions = count
	m.state.mu.Unlock()
}

// skillLabels maps skill names to label values, keeping at most max apart.
type skillLabels struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

func (s *skillLabels) label(name string) string {
	if name == "" {
		return SkillOther
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[name]; ok {
		return name
	}
	if len(s.seen) >= s.max || strings.Contains(name, "_") {
		return SkillOther
	}
	s.seen[name] = struct{}{}
	return name
}
