package service_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/skills"
)

const serviceConfig = `
daemon {
  approvers = ["4242"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script"]
}
policy "ask" {
  skills  = ["guarded"]
  confirm = ["skills.run_script"]
}
policy "no" {
  skills = ["denied"]
  deny   = ["skills.run_script"]
}
`

var (
	owner    = api.Peer{UID: 1000, GID: 1000, PID: 10, Process: "host"}
	stranger = api.Peer{UID: 1001, GID: 1001, PID: 11, Process: "other"}
	approver = api.Peer{UID: 4242, GID: 4242, PID: 12, Process: "approver"}
)

type fixture struct {
	svc   *service.Service
	rt    *servicetest.Runtime
	audit *servicetest.Auditor
	sk    map[string]*skills.Skill
	idx   *servicetest.Index
}

// newFixture is a service over fakes; withStores adds the bbolt stores
// (the daemon's set-up), without them it is `skillbox run`'s.
func newFixture(t *testing.T, withStores bool) *fixture {
	t.Helper()
	return newFixtureWith(t, withStores, serviceConfig, nil)
}

// newFixtureWith is newFixture with its own config and more skills.
func newFixtureWith(t *testing.T, withStores bool, config string, more []servicetest.SkillSpec) *fixture {
	t.Helper()
	return newFixtureOpts(t, withStores, config, more, nil)
}

// newFixtureOpts is newFixtureWith with the service's options adjusted by
// with (when set).
func newFixtureOpts(t *testing.T, withStores bool, config string, more []servicetest.SkillSpec, with func(*service.Options)) *fixture {
	t.Helper()
	cfg, err := policy.Parse([]byte(config), "service.hcl")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{rt: &servicetest.Runtime{}, audit: &servicetest.Auditor{}, sk: map[string]*skills.Skill{}}
	idx := servicetest.NewIndex()
	root := t.TempDir()
	for _, name := range []string{"plain", "guarded", "denied"} {
		sk := servicetest.MakeSkill(t, root, servicetest.SkillSpec{Name: name, Files: map[string]string{"scripts/run.sh": "echo hi\n"}})
		idx.Put(sk)
		f.sk[name] = sk
	}
	for _, sp := range more {
		sk := servicetest.MakeSkill(t, root, sp)
		idx.Put(sk)
		f.sk[sp.Name] = sk
	}
	f.idx = idx
	j := audit.NewJournal(f.audit, nil)
	eng := runner.New(runner.Options{Config: cfg, Images: &servicetest.Images{}, Runtime: f.rt, Audit: j, Pins: servicetest.LivePins{}})
	o := service.Options{Config: cfg, Skills: idx, Engine: eng, Audit: j}
	if withStores {
		st, err := store.OpenStateDB(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		o.Sessions = store.NewSessionStore(st, store.SessionOptions{})
		o.Confirmations = store.NewConfirmationStore(st, store.ConfirmationOptions{})
	}
	if with != nil {
		with(&o)
	}
	f.svc = service.New(o)
	return f
}

// collector is an event sink that keeps what it gets.
type collector struct {
	mu  sync.Mutex
	evs []api.Event
	ch  chan api.Event
}

func newCollector() *collector { return &collector{ch: make(chan api.Event, 100)} }

func (c *collector) sink(e api.Event) {
	c.mu.Lock()
	c.evs = append(c.evs, e)
	c.mu.Unlock()
	c.ch <- e
}

func (c *collector) methods() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.evs {
		out = append(out, e.EventMethod())
	}
	return out
}

func TestRunStreamsEventsInOrder(t *testing.T) {
	f := newFixture(t, true)
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		write(job.Invocation.Stdout, "one\n")
		write(job.Invocation.Stderr, "warn\n")
		write(job.Invocation.Stdout, "two\n")
		return &runtime.Result{Stdout: []byte("one\ntwo\n"), Stderr: []byte("warn\n"), Summary: outcome.Summary{Reason: runtime.ReasonExit, ExitCode: 2}}, nil
	}
	ctx := context.Background()
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	mustV(f.svc.LoadSkills(ctx, owner, api.LoadParams{SessionID: sid, Names: []string{"plain"}}))

	for _, stream := range []bool{false, true} {
		col := newCollector()
		res, err := f.svc.RunScript(api.WithEventSink(ctx, col.sink), owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Stream: stream}, Path: "scripts/run.sh"})
		if err != nil || res.ExitCode != 2 || res.Stdout != "one\ntwo\n" {
			t.Fatalf("stream=%v: %+v %v", stream, res, err)
		}
		got := strings.Join(col.methods(), " ")
		if !stream {
			if got != "" {
				t.Errorf("events without stream: %s", got)
			}
			continue
		}
		if want := "run.started run.output run.output run.output run.exited"; got != want {
			t.Fatalf("events %s, want %s", got, want)
		}
		var seqs []string
		for _, e := range col.evs[1:4] {
			o := e.(api.RunOutputEvent)
			if o.RunID != res.RunID {
				t.Errorf("event of run %s, result of %s", o.RunID, res.RunID)
			}
			seqs = append(seqs, o.Stream+":"+o.Data)
			if o.Seq != uint64(len(seqs)) {
				t.Errorf("seq %d, want %d", o.Seq, len(seqs))
			}
		}
		if strings.Join(seqs, "|") != "stdout:one\n|stderr:warn\n|stdout:two\n" {
			t.Errorf("outputs %q", seqs)
		}
		if x := col.evs[4].(api.RunExitedEvent); x.ExitCode != 2 || x.Reason != string(runtime.ReasonExit) {
			t.Errorf("run.exited %+v", x)
		}
	}
}

func TestCancelRunOnlyByOwner(t *testing.T) {
	f := newFixture(t, false)
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		write(job.Invocation.Stdout, "started\n")
		<-ctx.Done()
		return &runtime.Result{Stdout: []byte("started\n"), Summary: outcome.Summary{Reason: runtime.ReasonKilled, ExitCode: 137, Signal: "SIGKILL"}}, nil
	}
	col := newCollector()
	ctx := api.WithEventSink(context.Background(), col.sink)
	type answer struct {
		out *service.Finished
		err error
	}
	done := make(chan answer, 1)
	go func() {
		out, err := f.svc.Run(ctx, owner, service.RunRequest{Skill: f.sk["plain"], Script: "scripts/run.sh"}, service.RunOptions{Method: "test", Stream: true})
		done <- answer{out, err}
	}()
	started := (<-col.ch).(api.RunStartedEvent)
	<-col.ch // the first output: the run is in the sandbox

	if _, err := f.svc.CancelRun(ctx, stranger, api.CancelRunParams{RunID: started.RunID}); api.KindOf(err) != api.KindNotFound {
		t.Fatalf("another uid cancelled the run: %v", err)
	}
	if _, err := f.svc.CancelRun(ctx, owner, api.CancelRunParams{}); api.KindOf(err) != api.KindInvalidParams {
		t.Fatalf("cancel without run_id: %v", err)
	}
	res, err := f.svc.CancelRun(ctx, owner, api.CancelRunParams{RunID: started.RunID})
	if err != nil || !res.Cancelled {
		t.Fatalf("owner's cancel: %+v %v", res, err)
	}
	a := <-done
	if a.err != nil || a.out.Result.Reason != runtime.ReasonCancelled {
		t.Fatalf("cancelled run: %+v %v", a.out, a.err)
	}
	if x := (<-col.ch).(api.RunExitedEvent); x.Reason != string(runtime.ReasonCancelled) {
		t.Errorf("run.exited %+v", x)
	}
	ends := f.audit.Events(audit.EventRunEnd)
	if len(ends) != 1 || ends[0].Outcome != "cancelled" {
		t.Errorf("run.end records %+v", ends)
	}
	if _, err := f.svc.CancelRun(ctx, owner, api.CancelRunParams{RunID: started.RunID}); api.KindOf(err) != api.KindNotFound {
		t.Errorf("cancel of an ended run: %v", err)
	}
}

// The authorization path without a confirmation store (skillbox run): a
// deny is final, confirm needs the caller to approve it itself (--yes),
// and only an approver may; the approval is audited.
func TestRunSelfApprove(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	run := func(who api.Peer, skill string, self bool) (*service.Finished, error) {
		return f.svc.Run(ctx, who, service.RunRequest{Skill: f.sk[skill], Script: "scripts/run.sh"},
			service.RunOptions{Method: "skillbox run", SelfApprove: self, SelfApproveHint: "re-run with --yes"})
	}
	for _, tc := range []struct {
		name  string
		who   api.Peer
		skill string
		self  bool
		kind  string
		want  string
	}{
		{"deny", approver, "denied", true, api.KindDenied, `policy "no"`},
		{"confirm without self-approval", approver, "guarded", false, api.KindConfirmationRequired, "re-run with --yes"},
		{"confirm by a non-approver", owner, "guarded", true, api.KindDenied, "not one of the approvers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(tc.who, tc.skill, tc.self)
			if api.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v (kind %s), want %s mentioning %q", err, api.KindOf(err), tc.kind, tc.want)
			}
		})
	}
	if n := len(f.rt.Jobs()); n != 0 {
		t.Fatalf("%d runs were refused yet ran", n)
	}
	out, err := run(approver, "guarded", true)
	if err != nil || !strings.HasPrefix(out.ConfirmationID, "cli_") {
		t.Fatalf("self-approved run: %+v %v", out, err)
	}
	recs := f.audit.Events(audit.EventConfirmApprove)
	if len(recs) != 1 || recs[0].Detail["via"] != "--yes" || recs[0].Confirmation.Digest != out.Plan.Digest() || recs[0].Peer.UID != approver.UID {
		t.Errorf("confirmation.approve records %+v", recs)
	}
	if _, err := f.svc.CreateSession(ctx, owner, api.CreateSessionParams{}); !errors.Is(err, api.ErrUnavailable) {
		t.Errorf("sessions without a store: %v", err)
	}
}

func mustV[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// write is a script writing to a stream that may have no live copy.
func write(s runtime.StreamSink, data string) {
	if s != nil {
		s.Write([]byte(data))
	}
}

// TestFollowRun: a run's owner and approvers follow its output live (the
// output so far, then each chunk, then the end); anyone else is told the
// run is not there.
func TestFollowRun(t *testing.T) {
	f := newFixture(t, false)
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		write(job.Invocation.Stdout, "first\n")
		<-ctx.Done()
		write(job.Invocation.Stderr, "stopping\n")
		return &runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonKilled, ExitCode: 137, Signal: "SIGKILL"}}, nil
	}
	col := newCollector()
	ctx := api.WithEventSink(context.Background(), col.sink)
	done := make(chan error, 1)
	go func() {
		_, err := f.svc.Run(ctx, owner, service.RunRequest{Skill: f.sk["plain"], Script: "scripts/run.sh"}, service.RunOptions{Method: "test", Stream: true})
		done <- err
	}()
	started := (<-col.ch).(api.RunStartedEvent)
	<-col.ch // the first output

	for _, tc := range []struct {
		name string
		who  api.Peer
		id   string
		kind string
	}{
		{"stranger", stranger, started.RunID, api.KindNotFound},
		{"no run id", owner, "", api.KindInvalidParams},
		{"unknown run", owner, "run_nope", api.KindNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.svc.FollowRun(ctx, tc.who, tc.id); api.KindOf(err) != tc.kind {
				t.Errorf("FollowRun: %v, want %s", err, tc.kind)
			}
		})
	}
	var followers []*service.RunFollower
	for _, who := range []api.Peer{owner, approver} {
		fl, err := f.svc.FollowRun(ctx, who, started.RunID)
		if err != nil {
			t.Fatalf("uid %d follows: %v", who.UID, err)
		}
		defer fl.Close()
		followers = append(followers, fl)
	}
	if _, err := f.svc.CancelRun(ctx, owner, api.CancelRunParams{RunID: started.RunID}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, fl := range followers {
		var got []string
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for {
			evs, err := fl.Next(wctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("follower %d: %v after %v", i, err, got)
			}
			for _, ev := range evs {
				s := ev.EventMethod()
				switch e := ev.(type) {
				case api.RunOutputEvent:
					s += " " + e.Stream + ":" + strings.TrimSpace(e.Data)
				case api.RunExitedEvent:
					s += " " + e.Reason
				}
				got = append(got, s)
			}
		}
		cancel()
		if want := "run.started|run.output stdout:first|run.output stderr:stopping|run.exited cancelled"; strings.Join(got, "|") != want {
			t.Errorf("follower %d got %q, want %q", i, strings.Join(got, "|"), want)
		}
	}
}
