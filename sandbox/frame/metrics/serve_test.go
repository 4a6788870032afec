package metrics_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/frame/metrics"
	"github.com/skillbox/skillbox/sandbox/frame/metrics/metricstest"
	"github.com/skillbox/skillbox/skills"
)

const scrapeConfig = `
daemon {
  approvers = ["4242"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
}
policy "ask" {
  skills  = ["guarded"]
  confirm = ["skills.run_script"]
}
`

var (
	host     = api.Peer{UID: 1000, GID: 1000, PID: 10, Process: "host"}
	approver = api.Peer{UID: 4242, GID: 4242, PID: 12, Process: "approver"}
)

// TestScrape: a fixed set of runs, sessions, confirmations and builds
// through the service (over the fake runtime and stores the service tests
// use), then one scrape of the endpoint on a Unix socket, parsed as
// Prometheus text, shows exactly those counts.
func TestScrape(t *testing.T) {
	ctx := context.Background()
	cfg, err := policy.Parse([]byte(scrapeConfig), "metrics.hcl")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	idx := servicetest.NewIndex()
	sk := map[string]*skills.Skill{}
	for _, name := range []string{"plain", "second", "guarded"} {
		s := servicetest.MakeSkill(t, root, servicetest.SkillSpec{Name: name, Files: map[string]string{"scripts/run.sh": "echo hi\n"}})
		idx.Put(s)
		sk[name] = s
	}
	st, err := store.OpenStateDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clock := servicetest.NewClock()
	sessions := store.NewSessionStore(st, store.SessionOptions{})
	confirms := store.NewConfirmationStore(st, store.ConfirmationOptions{Now: clock.Now})

	// The wiring the stack does for daemon { metrics = "…" }.
	m := metrics.New(metrics.Options{MaxSkills: 2})
	auditor := &servicetest.Auditor{}
	j := audit.NewJournal(auditor, nil)
	j.Observe(m)
	rt := &servicetest.Runtime{RunFunc: servicetest.RunByLastArg}
	eng := runner.New(runner.Options{Config: cfg, Images: &servicetest.Images{}, Runtime: rt, Audit: j, Pins: servicetest.LivePins{}})
	svc := service.New(service.Options{Config: cfg, Skills: idx, Engine: eng, Audit: j,
		Sessions: sessions, Confirmations: confirms, Metrics: m})
	m.WatchSessions(sessions.Count)
	m.WatchPool(func() runtime.PoolStats { return runtime.PoolStats{Keys: 1, Idle: 2, Warm: 1, Cold: 6} })

	ses := func() string {
		t.Helper()
		r, err := svc.CreateSession(ctx, host, api.CreateSessionParams{})
		if err != nil {
			t.Fatal(err)
		}
		return r.SessionID
	}
	run := func(sid, skill, arg, confirmation string) error {
		_, err := svc.Run(ctx, host, service.RunRequest{Skill: sk[skill], Script: "scripts/run.sh", Args: []string{arg}},
			service.RunOptions{Method: api.MethodSkillsRunScript, SessionID: sid, ConfirmationID: confirmation})
		return err
	}
	s1, s2, s3 := ses(), ses(), ses()
	for _, arg := range []string{"ok", "warm", "fail", "timeout"} {
		if err := run(s1, "plain", arg, ""); err != nil {
			t.Fatalf("plain %s: %v", arg, err)
		}
	}
	if err := run(s1, "second", "egress", ""); err != nil {
		t.Fatal(err)
	}
	if err := run(s1, "second", "boom", ""); err == nil {
		t.Fatal("a run whose sandbox does not start succeeded")
	}
	// guarded (beyond MaxSkills: "_other") waits 90s for an approval, then
	// runs; in another session it waits 30s and is denied.
	var cr *api.ConfirmationRequiredError
	if err := run(s2, "guarded", "ok", ""); !errors.As(err, &cr) {
		t.Fatalf("guarded: %v", err)
	}
	clock.Advance(90 * time.Second)
	if _, err := svc.ApproveConfirmation(ctx, approver, api.ConfirmationIDParams{ID: cr.ID}); err != nil {
		t.Fatal(err)
	}
	if err := run(s2, "guarded", "ok", cr.ID); err != nil {
		t.Fatal(err)
	}
	if err := run(s3, "guarded", "ok", ""); !errors.As(err, &cr) {
		t.Fatalf("guarded in another session: %v", err)
	}
	clock.Advance(30 * time.Second)
	if _, err := svc.DenyConfirmation(ctx, approver, api.ConfirmationIDParams{ID: cr.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CloseSession(ctx, host, api.SessionParams{SessionID: s3}); err != nil {
		t.Fatal(err)
	}
	// A layer build is audited by the engine's dependency builder; an
	// image build is heard from the image store.
	if err := j.Record(ctx, &audit.Record{Event: runner.EventDepsBuild, Skill: &audit.SkillRef{Name: "plain"}, Outcome: audit.OutcomeOK}); err != nil {
		t.Fatal(err)
	}
	m.ImageBuilt("python", nil)
	// One append fails: the audit log is down.
	auditor.Fail(errors.New("disk full"))
	if _, err := svc.CreateSession(ctx, host, api.CreateSessionParams{}); err == nil {
		t.Fatal("a session was created while the audit log was down")
	}
	appends := len(auditor.Records()) + 1

	sock := serve(t, m)
	got := metricstest.Flatten(scrape(t, sock), "skillbox_")
	want := map[string]float64{
		`skillbox_runs_total{outcome="ok",reason="exit",skill="plain"}`:        2,
		`skillbox_runs_total{outcome="failed",reason="exit",skill="plain"}`:    1,
		`skillbox_runs_total{outcome="failed",reason="timeout",skill="plain"}`: 1,
		`skillbox_runs_total{outcome="ok",reason="exit",skill="second"}`:       1,
		`skillbox_runs_total{outcome="error",reason="none",skill="second"}`:    1,
		`skillbox_runs_total{outcome="ok",reason="exit",skill="_other"}`:       1,
		`skillbox_run_duration_seconds_count{skill="plain",start="cold"}`:      3,
		`skillbox_run_duration_seconds_count{skill="plain",start="warm"}`:      1,
		`skillbox_run_duration_seconds_count{skill="second",start="cold"}`:     2,
		`skillbox_run_duration_seconds_count{skill="_other",start="cold"}`:     1,
		`skillbox_egress_connections_total{skill="second"}`:                    2,
		`skillbox_egress_denials_total{skill="second"}`:                        1,
		`skillbox_confirmation_wait_seconds_count{decision="approved"}`:        1,
		`skillbox_confirmation_wait_seconds_sum{decision="approved"}`:          90,
		`skillbox_confirmation_wait_seconds_count{decision="denied"}`:          1,
		`skillbox_confirmation_wait_seconds_sum{decision="denied"}`:            30,
		`skillbox_builds_total{kind="layer",outcome="ok"}`:                     1,
		`skillbox_builds_total{kind="image",outcome="ok"}`:                     1,
		`skillbox_audit_append_duration_seconds_count{}`:                       float64(appends),
		`skillbox_audit_append_failures_total{}`:                               1,
		`skillbox_sessions_open{}`:                                             2,
		`skillbox_pool_sandboxes{state="idle"}`:                                2,
		`skillbox_pool_sandboxes{state="booting"}`:                             0,
		`skillbox_pool_keys{}`:                                                 1,
		`skillbox_pool_idle_memory_bytes{}`:                                    0,
		`skillbox_pool_hits_total{}`:                                           1,
		`skillbox_pool_misses_total{}`:                                         6,
		`skillbox_pool_boot_failures_total{}`:                                  0,
	}
	// Durations are measured, not fixed: only their counts are compared.
	timed := func(k string) bool {
		return strings.HasPrefix(k, "skillbox_run_duration_seconds_sum") || strings.HasPrefix(k, "skillbox_audit_append_duration_seconds_sum")
	}
	metricstest.CheckExact(t, got, want, timed)
	if len(auditor.Events(audit.EventRunEnd)) != 7 {
		t.Errorf("%d run.end records, want the 7 runs counted", len(auditor.Events(audit.EventRunEnd)))
	}
}

// serve serves m on a Unix socket in a temp dir made with the rules of
// the daemon's socket (mode 0600 here) and returns its path.
func serve(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "metrics.sock")
	ln, err := metrics.Listen(policy.MetricsAddress{Network: "unix", Address: sock}, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&fs.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v: want a socket of mode 0600", fi, err)
	}
	ep := m.Serve(ln, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ep.Close(ctx); err != nil {
			t.Errorf("closing the endpoint: %v", err)
		}
		if _, err := os.Stat(sock); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the socket is left after Close: %v", err)
		}
	})
	return sock
}

// scrape scrapes the endpoint and checks the Go runtime's metrics are
// served beside skillbox's.
func scrape(t *testing.T, sock string) map[string]*dto.MetricFamily {
	t.Helper()
	fams := metricstest.Scrape(t, sock)
	if _, ok := fams["go_goroutines"]; !ok {
		t.Errorf("no Go runtime metrics beside skillbox's")
	}
	return fams
}

// TestListenRefuses: the endpoint is never opened where another machine
// could reach it, nor when metrics are off.
func TestListenRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr policy.MetricsAddress
		err  string
	}{
		{"off", policy.MetricsAddress{}, "metrics are off"},
		{"any address", policy.MetricsAddress{Network: "tcp", Address: "0.0.0.0:9464"}, "is not on loopback"},
		{"a name", policy.MetricsAddress{Network: "tcp", Address: "localhost:9464"}, "literal loopback IP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := metrics.Listen(tc.addr, 0o600, "")
			if err == nil {
				ln.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Listen(%+v) = %v, want an error containing %q", tc.addr, err, tc.err)
			}
		})
	}
}
