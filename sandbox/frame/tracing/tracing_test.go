package tracing_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/runtime/span"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/doors/daemon"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
	"github.com/skillbox/skillbox/sandbox/frame/metrics"
	"github.com/skillbox/skillbox/sandbox/frame/tracing"
	"github.com/skillbox/skillbox/sandbox/frame/tracing/tracingtest"
)

const traceConfig = `
policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
}
`

// secretArg is an argument no span may carry.
const secretArg = "s3cret-arg"

// lifecycle is a fake runtime whose runs go through runtime.RunLifecycle,
// as the real backends' do, so the sandbox steps are traced; a run's
// last argument "fail" exits 3.
type lifecycle struct{}

var (
	_ runtime.Lifecycle = lifecycle{}
	_ runtime.Sandbox   = (*sandbox)(nil)
)

func (lifecycle) Name() string                            { return "fake" }
func (lifecycle) Version(context.Context) (string, error) { return "fake-1", nil }
func (l lifecycle) Run(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
	return runtime.RunLifecycle(ctx, l, job)
}
func (lifecycle) Create(_ context.Context, spec runtime.SandboxSpec) (runtime.Sandbox, error) {
	return &sandbox{id: spec.ID}, nil
}
func (lifecycle) Close(context.Context) error { return nil }

type sandbox struct {
	id   string
	args []string
}

func (s *sandbox) ID() string                  { return s.id }
func (s *sandbox) Start(context.Context) error { return nil }
func (s *sandbox) Deliver(_ context.Context, inv runtime.Invocation) error {
	s.args = inv.Args
	return nil
}
func (s *sandbox) Wait(context.Context) (*runtime.Result, error) {
	res := &runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit, Runtime: "fake"}}
	if s.args[len(s.args)-1] == "fail" {
		res.ExitCode = 3
	}
	return res, nil
}
func (s *sandbox) Destroy(context.Context) error { return nil }

// daemonRig is a daemon over the fake runtime on a Unix socket, wired as
// the stack wires it: tracer (nil: traces off) and metrics (nil: off).
type daemonRig struct {
	client  *client.Client
	auditor *servicetest.Auditor
	session string
}

func startDaemon(tb testing.TB, tracer trace.Tracer, m *metrics.Metrics) *daemonRig {
	tb.Helper()
	ctx := context.Background()
	cfg, err := policy.Parse([]byte(traceConfig), "traces.hcl")
	if err != nil {
		tb.Fatal(err)
	}
	root := tb.TempDir()
	sk := servicetest.MakeSkill(tb, root, servicetest.SkillSpec{Name: "plain", Files: map[string]string{"scripts/run.sh": "echo hi\n"}})
	st, err := store.OpenStateDB(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	auditor := &servicetest.Auditor{}
	j := audit.NewJournal(auditor, nil)
	so := service.Options{Config: cfg, Skills: servicetest.NewIndex(sk), Audit: j,
		Sessions: store.NewSessionStore(st, store.SessionOptions{}), Confirmations: store.NewConfirmationStore(st, store.ConfirmationOptions{})}
	if m != nil {
		j.Observe(m)
		so.Metrics = m
	}
	so.Engine = runner.New(runner.Options{Config: cfg, Images: &servicetest.Images{}, Runtime: lifecycle{}, Audit: j, Pins: servicetest.LivePins{}})
	d := daemon.New(daemon.Options{Options: so, Tracer: tracer})
	sock := filepath.Join(tb.TempDir(), "s.sock")
	ln, err := sockfile.Listen(sock, 0o600, "")
	if err != nil {
		tb.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Server().Serve(sctx, ln) }()
	tb.Cleanup(func() {
		d.Server().Shutdown(context.Background())
		cancel()
		<-done
	})
	cl, err := client.Dial(ctx, sock)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cl.Close() })
	ses, err := cl.CreateSession(ctx, api.Peer{}, api.CreateSessionParams{})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := cl.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: ses.SessionID, Names: []string{"plain"}}); err != nil {
		tb.Fatal(err)
	}
	return &daemonRig{client: cl, auditor: auditor, session: ses.SessionID}
}

func (r *daemonRig) run(tb testing.TB, last string) *api.RunScriptResult {
	tb.Helper()
	res, err := r.client.RunScript(context.Background(), api.Peer{}, api.RunScriptParams{
		RunInputs: api.RunInputs{SessionID: r.session, Args: []string{secretArg, last}},
		Skill:     "plain",
		Path:      "scripts/run.sh",
	})
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// runTraceIDs are the trace ids of the run's audit records (run.start,
// run.end and the policy decision before them), by run id.
func (r *daemonRig) runTraceIDs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, rec := range r.auditor.Records() {
		if rec.Event != audit.EventRunStart && rec.Event != audit.EventRunEnd {
			continue
		}
		id := rec.Run.RunID
		if prev, ok := out[id]; ok && prev != rec.TraceID {
			t.Errorf("run %s: run.start names trace %q, run.end %q", id, prev, rec.TraceID)
		}
		out[id] = rec.TraceID
	}
	return out
}

// wantTree is the span tree of one skills.run_script, as "parent > child"
// lines, the audit appends named by their event.
var wantTree = []string{
	"skills.run_script > policy.decide",
	"policy.decide > audit.append policy.decision",
	"skills.run_script > image.resolve",
	"skills.run_script > deps.layer",
	"skills.run_script > audit.append run.start",
	"skills.run_script > sandbox.run",
	"sandbox.run > sandbox.boot",
	"sandbox.run > sandbox.deliver",
	"sandbox.run > sandbox.wait",
	"skills.run_script > audit.append run.end",
}

// checkRunTrace checks one run's trace: its tree, its bounded
// attributes, and that no span carries the run's arguments.
func checkRunTrace(t *testing.T, spans []tracingtest.Span, exit string) {
	t.Helper()
	want := slices.Clone(wantTree)
	slices.Sort(want)
	if got := tracingtest.Tree(spans); !slices.Equal(got, want) {
		t.Errorf("span tree:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, s := range spans {
		for k, v := range s.Attrs {
			if strings.Contains(v, secretArg) {
				t.Errorf("span %s attribute %s carries an argument: %q", s.Name, k, v)
			}
		}
		switch s.Name {
		case "skills.run_script":
			if s.Attrs[string(span.AttrSkill)] != "plain" || s.Attrs[string(span.AttrScript)] != "scripts/run.sh" || s.Attrs["rpc.system"] != "jsonrpc" {
				t.Errorf("root span attributes %v", s.Attrs)
			}
		case "sandbox.run":
			if s.Attrs[string(span.AttrWarm)] != "false" || s.Attrs[string(span.AttrReason)] != "exit" ||
				s.Attrs[string(span.AttrExitCode)] != exit || s.Attrs[string(span.AttrRuntime)] != "fake" {
				t.Errorf("sandbox.run attributes %v", s.Attrs)
			}
		case "policy.decide":
			if s.Attrs[string(span.AttrEffect)] != "allow" || s.Attrs[string(span.AttrRule)] == "" {
				t.Errorf("policy.decide attributes %v", s.Attrs)
			}
		}
	}
}

// TestRunSpans: with traces on, a skills.run_script over the socket is
// one trace, from the call's root span through policy, image, layer,
// sandbox boot, delivery and wait to the audit appends, and every audit
// record of the run names it; with traces off, none does.
func TestRunSpans(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tr, err := tracing.New(tracing.Options{Exporter: exp, Sync: true, Sample: 1, Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		rig := startDaemon(t, tr.Tracer(), nil)
		res := rig.run(t, "fail")
		// The root span ends before the answer is written, and Sync
		// exports each span as it ends.
		runs := tracingtest.ByTrace(tracingtest.FromStubs(exp.GetSpans()), "skills.run_script")
		if len(runs) != 1 {
			t.Fatalf("%d traces of skills.run_script, want 1", len(runs))
		}
		for id, spans := range runs {
			checkRunTrace(t, spans, "3")
			if got := rig.runTraceIDs(t)[res.RunID]; got != id {
				t.Errorf("run %s audit records name trace %q, want %q", res.RunID, got, id)
			}
		}
		for _, rec := range rig.auditor.Records() {
			if rec.Event == audit.EventDecision && rec.TraceID == "" {
				t.Errorf("policy.decision record without a trace id: %+v", rec)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		rig := startDaemon(t, nil, nil)
		rig.run(t, "ok")
		for _, rec := range rig.auditor.Records() {
			if rec.TraceID != "" {
				t.Errorf("%s record names trace %q with traces off", rec.Event, rec.TraceID)
			}
		}
	})
	t.Run("not sampled", func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tr, err := tracing.New(tracing.Options{Exporter: exp, Sync: true, Sample: 1e-18})
		if err != nil {
			t.Fatal(err)
		}
		rig := startDaemon(t, tr.Tracer(), nil)
		rig.run(t, "ok")
		if n := len(exp.GetSpans()); n != 0 {
			t.Errorf("%d spans exported from calls not sampled", n)
		}
		for _, rec := range rig.auditor.Records() {
			if rec.TraceID != "" {
				t.Errorf("%s record names trace %q, which was not sampled", rec.Event, rec.TraceID)
			}
		}
	})
}

// TestCollector: a collector on loopback receives one trace per run, over
// OTLP/HTTP as daemon.traces configures it, with the expected spans, and
// each run's audit records name its trace.
func TestCollector(t *testing.T) {
	col := tracingtest.Start()
	defer col.Close()
	ep, err := policy.ParseTracesEndpoint(col.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracing.New(tracing.Options{Endpoint: ep, Sample: policy.DefaultTracesSample, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	rig := startDaemon(t, tr.Tracer(), nil)
	runIDs := []string{rig.run(t, "ok").RunID, rig.run(t, "ok").RunID}
	if err := tr.Shutdown(context.Background()); err != nil { // sends the batch
		t.Fatal(err)
	}
	if err := col.Err(); err != nil {
		t.Fatal(err)
	}
	if svc := col.Services(); len(svc) != 1 || !svc[tracing.ServiceName] {
		t.Errorf("service.name of the spans: %v, want %q", svc, tracing.ServiceName)
	}
	runs := tracingtest.ByTrace(col.Spans(), "skills.run_script")
	if len(runs) != len(runIDs) {
		t.Fatalf("collector got %d run traces, want %d", len(runs), len(runIDs))
	}
	ids := rig.runTraceIDs(t)
	for _, id := range runIDs {
		spans, ok := runs[ids[id]]
		if !ok {
			t.Errorf("run %s names trace %q, which the collector did not get", id, ids[id])
			continue
		}
		checkRunTrace(t, spans, "0")
	}
}

// discard is an exporter that drops what it is sent, so the benchmark
// measures skillbox's cost of tracing, not a collector's.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkRunObservability is one skills.run_script over the socket,
// through the daemon and the fake runtime, with metrics and traces off
// and on (every call sampled, spans batched to an exporter that drops
// them). The fake runtime takes no time, so the difference between the
// two is the absolute cost per run of metrics and traces; docs/BENCHMARKS.md
// sets it against a real warm run's p50.
//
//	go test -run '^$' -bench BenchmarkRunObservability -benchmem -count 10 ./sandbox/frame/tracing/
func BenchmarkRunObservability(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "metrics+traces"
		}
		b.Run(name, func(b *testing.B) {
			var tracer trace.Tracer
			var m *metrics.Metrics
			if on {
				tr, err := tracing.New(tracing.Options{Exporter: discard{}, Sample: 1})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { tr.Shutdown(context.Background()) })
				tracer, m = tr.Tracer(), metrics.New(metrics.Options{})
			}
			rig := startDaemon(b, tracer, m)
			rig.run(b, "ok") // the first run pins the skill
			for b.Loop() {
				rig.run(b, "ok")
			}
		})
	}
}
