package metrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/frame/metrics"
	"github.com/skillbox/skillbox/sandbox/frame/metrics/metricstest"
)

func exit(code int) *int { return &code }

// TestRecording: what each report counts, and under which labels.
func TestRecording(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	runEnd := func(skill string, ri audit.RunInfo, outcome string) *audit.Record {
		r := &audit.Record{Event: audit.EventRunEnd, Run: &ri, Outcome: outcome}
		if skill != "" {
			r.Skill = &audit.SkillRef{Name: skill}
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		report func(m *metrics.Metrics)
		want   map[string]float64
	}{
		{
			name: "run ok cold",
			report: func(m *metrics.Metrics) {
				m.Appended(runEnd("pdf", audit.RunInfo{Reason: "exit", ExitCode: exit(0), Started: t0, Ended: t0.Add(1500 * time.Millisecond)}, "exit"), 0, nil)
			},
			want: map[string]float64{
				`skillbox_runs_total{outcome="ok",reason="exit",skill="pdf"}`:   1,
				`skillbox_run_duration_seconds_count{skill="pdf",start="cold"}`: 1,
				`skillbox_run_duration_seconds_sum{skill="pdf",start="cold"}`:   1.5,
				`skillbox_audit_append_duration_seconds_count{}`:                1,
				`skillbox_audit_append_duration_seconds_sum{}`:                  0,
				`skillbox_audit_append_failures_total{}`:                        0,
			},
		},
		{
			name: "run failed warm, a session run, duration from the result when the record has no times",
			report: func(m *metrics.Metrics) {
				m.Appended(runEnd("pdf", audit.RunInfo{Reason: "exit", ExitCode: exit(2), Warm: true, DurationMS: 250}, "exit"), 0, nil)
				m.Appended(runEnd("pdf", audit.RunInfo{Reason: "oom", ExitCode: exit(137), Warm: true, DurationMS: 250}, "oom"), 0, nil)
				m.Appended(runEnd("pdf", audit.RunInfo{Reason: "exit", ExitCode: exit(0), Isolation: "session", DurationMS: 100}, "exit"), 0, nil)
			},
			want: map[string]float64{
				`skillbox_runs_total{outcome="failed",reason="exit",skill="pdf"}`:  1,
				`skillbox_runs_total{outcome="failed",reason="oom",skill="pdf"}`:   1,
				`skillbox_run_duration_seconds_count{skill="pdf",start="warm"}`:    2,
				`skillbox_run_duration_seconds_sum{skill="pdf",start="warm"}`:      0.5,
				`skillbox_runs_total{outcome="ok",reason="exit",skill="pdf"}`:      1,
				`skillbox_run_duration_seconds_count{skill="pdf",start="session"}`: 1,
				`skillbox_run_duration_seconds_sum{skill="pdf",start="session"}`:   0.1,
				`skillbox_audit_append_duration_seconds_count{}`:                   3,
				`skillbox_audit_append_duration_seconds_sum{}`:                     0,
				`skillbox_audit_append_failures_total{}`:                           0,
			},
		},
		{
			name: "run error, run_code, egress, failed append",
			report: func(m *metrics.Metrics) {
				m.Appended(runEnd("web", audit.RunInfo{}, audit.OutcomeError), 2*time.Second, errors.New("disk full"))
				m.Appended(runEnd("", audit.RunInfo{Reason: "exit", ExitCode: exit(0), Code: &audit.CodeInfo{}}, "exit"), 0, nil)
				m.Appended(runEnd("web", audit.RunInfo{Reason: "exit", ExitCode: exit(0), EgressStats: &egress.Stats{Connections: 3, Denied: 2}}, "exit"), 0, nil)
			},
			want: map[string]float64{
				`skillbox_runs_total{outcome="error",reason="none",skill="web"}`:      1,
				`skillbox_runs_total{outcome="ok",reason="exit",skill="_run_code"}`:   1,
				`skillbox_runs_total{outcome="ok",reason="exit",skill="web"}`:         1,
				`skillbox_run_duration_seconds_count{skill="web",start="cold"}`:       2,
				`skillbox_run_duration_seconds_sum{skill="web",start="cold"}`:         0,
				`skillbox_run_duration_seconds_count{skill="_run_code",start="cold"}`: 1,
				`skillbox_run_duration_seconds_sum{skill="_run_code",start="cold"}`:   0,
				`skillbox_egress_connections_total{skill="web"}`:                      3,
				`skillbox_egress_denials_total{skill="web"}`:                          2,
				`skillbox_audit_append_duration_seconds_count{}`:                      3,
				`skillbox_audit_append_duration_seconds_sum{}`:                        2,
				`skillbox_audit_append_failures_total{}`:                              1,
			},
		},
		{
			name: "skill names beyond the cap are _other",
			report: func(m *metrics.Metrics) {
				for _, s := range []string{"a", "b", "c", "a", "d", "b"} {
					m.Appended(runEnd(s, audit.RunInfo{Reason: "exit", ExitCode: exit(0)}, "exit"), 0, nil)
				}
			},
			want: map[string]float64{
				`skillbox_runs_total{outcome="ok",reason="exit",skill="a"}`:        2,
				`skillbox_runs_total{outcome="ok",reason="exit",skill="b"}`:        2,
				`skillbox_runs_total{outcome="ok",reason="exit",skill="_other"}`:   2,
				`skillbox_run_duration_seconds_count{skill="a",start="cold"}`:      2,
				`skillbox_run_duration_seconds_sum{skill="a",start="cold"}`:        0,
				`skillbox_run_duration_seconds_count{skill="b",start="cold"}`:      2,
				`skillbox_run_duration_seconds_sum{skill="b",start="cold"}`:        0,
				`skillbox_run_duration_seconds_count{skill="_other",start="cold"}`: 2,
				`skillbox_run_duration_seconds_sum{skill="_other",start="cold"}`:   0,
				`skillbox_audit_append_duration_seconds_count{}`:                   6,
				`skillbox_audit_append_duration_seconds_sum{}`:                     0,
				`skillbox_audit_append_failures_total{}`:                           0,
			},
		},
		{
			name: "builds, confirmations, other records",
			report: func(m *metrics.Metrics) {
				m.Appended(&audit.Record{Event: runner.EventDepsBuild, Outcome: audit.OutcomeOK}, 0, nil)
				m.Appended(&audit.Record{Event: runner.EventDepsBuild, Outcome: audit.OutcomeRefused}, 0, nil)
				m.Appended(&audit.Record{Event: runner.EventDepsBuild, Outcome: "odd"}, 0, nil)
				m.Appended(&audit.Record{Event: audit.EventSessionCreate}, 0, nil)
				m.ImageBuilt("python", nil)
				m.ImageBuilt("node", errors.New("mmdebstrap failed"))
				decided := t0.Add(90 * time.Second)
				m.ConfirmationDecided(&api.Confirmation{State: api.ConfirmationApproved, Created: t0, DecidedAt: &decided})
				m.ConfirmationDecided(&api.Confirmation{State: api.ConfirmationDenied, Created: t0, DecidedAt: &decided})
				m.ConfirmationDecided(&api.Confirmation{State: api.ConfirmationPending, Created: t0}) // not decided: not counted
			},
			want: map[string]float64{
				`skillbox_builds_total{kind="layer",outcome="ok"}`:              1,
				`skillbox_builds_total{kind="layer",outcome="refused"}`:         1,
				`skillbox_builds_total{kind="layer",outcome="error"}`:           1,
				`skillbox_builds_total{kind="image",outcome="ok"}`:              1,
				`skillbox_builds_total{kind="image",outcome="error"}`:           1,
				`skillbox_confirmation_wait_seconds_count{decision="approved"}`: 1,
				`skillbox_confirmation_wait_seconds_sum{decision="approved"}`:   90,
				`skillbox_confirmation_wait_seconds_count{decision="denied"}`:   1,
				`skillbox_confirmation_wait_seconds_sum{decision="denied"}`:     90,
				`skillbox_audit_append_duration_seconds_count{}`:                4,
				`skillbox_audit_append_duration_seconds_sum{}`:                  0,
				`skillbox_audit_append_failures_total{}`:                        0,
			},
		},
		{
			name: "pool and sessions are read when scraped",
			report: func(m *metrics.Metrics) {
				m.WatchPool(func() runtime.PoolStats {
					return runtime.PoolStats{Keys: 2, Idle: 3, Booting: 1, IdlePSS: 64 << 20, Warm: 7, Cold: 5, BootFails: 1}
				})
				m.WatchSessions(func() (int, error) { return 4, nil })
			},
			want: map[string]float64{
				`skillbox_pool_sandboxes{state="idle"}`:          3,
				`skillbox_pool_sandboxes{state="booting"}`:       1,
				`skillbox_pool_keys{}`:                           2,
				`skillbox_pool_idle_memory_bytes{}`:              64 << 20,
				`skillbox_pool_hits_total{}`:                     7,
				`skillbox_pool_misses_total{}`:                   5,
				`skillbox_pool_boot_failures_total{}`:            1,
				`skillbox_sessions_open{}`:                       4,
				`skillbox_audit_append_duration_seconds_count{}`: 0,
				`skillbox_audit_append_duration_seconds_sum{}`:   0,
				`skillbox_audit_append_failures_total{}`:         0,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.New(metrics.Options{MaxSkills: 2})
			tc.report(m)
			fams, err := m.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]*dto.MetricFamily{}
			for _, f := range fams {
				byName[f.GetName()] = f
			}
			metricstest.CheckExact(t, metricstest.Flatten(byName, "skillbox_"), tc.want, nil)
		})
	}
}

// TestSessionCountFails: a session store that cannot be read fails only
// its own metric; the rest are still gathered.
func TestSessionCountFails(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.WatchSessions(func() (int, error) { return 0, errors.New("bolt: database not open") })
	m.ImageBuilt("python", nil)
	fams, err := m.Registry().Gather()
	if err == nil || !strings.Contains(err.Error(), "counting open sessions: bolt: database not open") {
		t.Fatalf("Gather error %v", err)
	}
	found := false
	for _, f := range fams {
		found = found || f.GetName() == "skillbox_builds_total"
		if f.GetName() == "skillbox_sessions_open" {
			t.Errorf("sessions_open gathered despite the error: %v", f)
		}
	}
	if !found {
		t.Errorf("the other metrics were not gathered")
	}
}

// TestHelpTexts: every skillbox metric says what it counts, and those
// labelled by skill say how the label is bounded.
func TestHelpTexts(t *testing.T) {
	m := metrics.New(metrics.Options{MaxSkills: 7})
	m.Appended(&audit.Record{Event: audit.EventRunEnd, Skill: &audit.SkillRef{Name: "x"}, Run: &audit.RunInfo{EgressStats: &egress.Stats{}}}, 0, nil)
	m.WatchPool(func() runtime.PoolStats { return runtime.PoolStats{} })
	m.WatchSessions(func() (int, error) { return 0, nil })
	m.ImageBuilt("python", nil)
	now := time.Now()
	m.ConfirmationDecided(&api.Confirmation{State: api.ConfirmationApproved, Created: now, DecidedAt: &now})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "skillbox_") {
			continue
		}
		n++
		if len(f.GetHelp()) < 20 {
			t.Errorf("%s: help %q", f.GetName(), f.GetHelp())
		}
		for _, mm := range f.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() == "skill" && !strings.Contains(f.GetHelp(), "first 7 skills seen, _other for the rest") {
					t.Errorf("%s: help does not say how skill labels are bounded: %q", f.GetName(), f.GetHelp())
				}
			}
		}
	}
	if n != 15 {
		t.Errorf("%d skillbox_ families, want 15", n)
	}
}
