package service_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/service"
)

// bigLogRuns is the size of the generated log: 150,000 runs, a run.start and
// a run.end each.
const bigLogRuns = 150000

var bigLog struct {
	once sync.Once
	dir  string
	err  error
}

// bigAuditLog writes, once per test binary, a log of bigLogRuns runs with a
// valid chain through the audit package's own writer (in 16 MiB files, so
// it rotates). Every 100th run is stranger's, the rest owner's.
func bigAuditLog(tb testing.TB) string {
	tb.Helper()
	bigLog.once.Do(func() {
		dir, err := os.MkdirTemp("", "skillbox-bigaudit-")
		if err != nil {
			bigLog.err = err
			return
		}
		bigLog.dir = dir
		l, err := audit.Open(dir, audit.Options{RotateBytes: 16 << 20})
		if err != nil {
			bigLog.err = err
			return
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		const workers = 64 // appends waiting together share one write and fsync
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < bigLogRuns; i += workers {
					for _, r := range bigRunPair(i) {
						if err := l.Append(ctx, r); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		bigLog.err = <-errs
		if err := l.Close(); bigLog.err == nil {
			bigLog.err = err
		}
	})
	if bigLog.err != nil {
		tb.Fatalf("generating the log: %v", bigLog.err)
	}
	return bigLog.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bigLog.dir != "" {
		os.RemoveAll(bigLog.dir)
	}
	os.Exit(code)
}

func bigRunPair(i int) []*audit.Record {
	peer := &api.Peer{UID: owner.UID, GID: owner.GID, PID: int32(4000 + i%100), Process: "agent-host"}
	if i%100 == 0 {
		peer = &api.Peer{UID: stranger.UID, GID: stranger.GID, PID: 11, Process: "other"}
	}
	skill := &audit.SkillRef{Name: fmt.Sprintf("pdf-tools-%d", i%7), Digest: "sha256:9f2c1e0b7d3a4c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6"}
	run := func() *audit.RunInfo {
		return &audit.RunInfo{RunID: fmt.Sprintf("run_%08d", i), Script: "scripts/extract_tables.py",
			ScriptSHA256: "4d967a8f1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6",
			Args:         []string{"--input", fmt.Sprintf("report-%d.pdf", i), "--pages", "1-3"},
			Runtime:      "runsc", Image: "python",
			Limits: runtime.Limits{Timeout: 30 * time.Second, MemoryBytes: 512 << 20, Pids: 128}}
	}
	start := &audit.Record{Event: audit.EventRunStart, Peer: peer, SessionID: fmt.Sprintf("sess_%04d", i%50), Skill: skill, Run: run()}
	end := &audit.Record{Event: audit.EventRunEnd, Peer: peer, SessionID: start.SessionID, Skill: skill, Run: run(), Outcome: "exit"}
	code := i % 3
	end.Run.DurationMS, end.Run.ExitCode, end.Run.Reason = int64(40+i%13), &code, "exit"
	return []*audit.Record{start, end}
}

// newBigAuditFixture is a daemon-shaped service (with stores) reading the
// generated log.
func newBigAuditFixture(t *testing.T) *fixture {
	t.Helper()
	dir := bigAuditLog(t)
	return newFixtureOpts(t, true, serviceConfig, nil, func(o *service.Options) { o.Config.Daemon.AuditDir = dir })
}

// TestAuditSearchCostsWhatItReturns: on a log of 150,000 runs, a search by
// a user who may see few records answers in under 100 ms once the index is
// warm, and 96 such searches at once leave another uid's sessions.create
// p50 under 50 ms.
func TestAuditSearchCostsWhatItReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a 150,000-run log")
	}
	f := newBigAuditFixture(t)
	ctx := context.Background()
	t0 := time.Now()
	res, err := f.svc.SearchAudit(ctx, stranger, service.AuditSearchParams{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first search (builds the index, verifies the chain): %s, %d matched, chain %+v", time.Since(t0), res.Matched, res.Chain)
	if !res.Chain.Intact || res.Matched != 2*bigLogRuns/100 || !res.OwnOnly {
		t.Fatalf("first search: matched %d, chain %+v", res.Matched, res.Chain)
	}
	var took []time.Duration
	for range 5 {
		t0 := time.Now()
		if _, err := f.svc.SearchAudit(ctx, stranger, service.AuditSearchParams{}); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	t.Logf("warm non-approver search: %v", took)
	if took[2] > 100*time.Millisecond {
		t.Errorf("a warm non-approver search took %s (p50), want under 100ms", took[2])
	}

	// The baseline, in this run on this machine: sessions.create with no
	// search under way.
	createP50 := func() (time.Duration, int) {
		var create []time.Duration
		deadline := time.Now().Add(20 * time.Second)
		for len(create) < 20 && time.Now().Before(deadline) {
			t0 := time.Now()
			ses, err := f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})
			if err != nil {
				t.Fatal(err)
			}
			create = append(create, time.Since(t0))
			f.svc.CloseSession(ctx, owner, api.SessionParams{SessionID: ses.SessionID})
		}
		slices.Sort(create)
		return create[len(create)/2], len(create)
	}
	base, _ := createP50()

	// 96 searches at once; meanwhile owner creates sessions.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 96 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := f.svc.SearchAudit(ctx, stranger, service.AuditSearchParams{})
				if api.KindOf(err) == api.KindLimitExceeded {
					// A client retrying as the refusal says, not at once.
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				} else if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	p50, n := createP50()
	close(stop)
	wg.Wait()
	t.Logf("sessions.create under 96 parallel searches: p50 %s over %d calls; alone %s", p50, n, base)
	// Searches share the CPU with it, but must not hold it up: within 50ms,
	// or within 25 times what it costs alone on a machine busy with more.
	if p50 > 50*time.Millisecond && p50 > 25*base {
		t.Errorf("sessions.create p50 %s under 96 parallel searches (alone %s), want under 50ms or 25 times alone", p50, base)
	}
}

// TestAuditFullVerifyFindsChangeInTheMiddle: an approver's full verify
// finds a line changed in the middle of the log even after incremental
// verification passed it.
func TestAuditFullVerifyFindsChangeInTheMiddle(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a 150,000-run log")
	}
	src := bigAuditLog(t)
	dir := t.TempDir()
	files, _ := filepath.Glob(filepath.Join(src, "audit-*.jsonl"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := newFixtureOpts(t, true, serviceConfig, nil, func(o *service.Options) { o.Config.Daemon.AuditDir = dir })
	ctx := context.Background()
	res, err := f.svc.SearchAudit(ctx, approver, service.AuditSearchParams{Limit: 1})
	if err != nil || !res.Chain.Intact {
		t.Fatalf("before the change: %v %+v", err, res)
	}
	// Change one byte of a run's args in the middle file.
	mid := files[len(files)/2]
	b, _ := os.ReadFile(filepath.Join(dir, filepath.Base(mid)))
	at := len(b) / 2
	for b[at] != '\n' {
		at++
	}
	i := at + 1 + bytesIndex(b[at+1:], "report-")
	b[i] = 'R'
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(mid)), b, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err = f.svc.SearchAudit(ctx, approver, service.AuditSearchParams{Limit: 1, FullVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Chain.Intact || res.Chain.Finding == "" {
		t.Fatalf("full verify after a change in the middle: %+v", res.Chain)
	}
	t.Logf("finding: %s", res.Chain.Finding)
	if _, err := f.svc.SearchAudit(ctx, stranger, service.AuditSearchParams{FullVerify: true}); api.KindOf(err) != api.KindDenied {
		t.Fatalf("a non-approver's full verify: %v, want denied", err)
	}
}

func bytesIndex(b []byte, s string) int {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return i
		}
	}
	return -1
}

// TestSkillHistoryFromIndexMatchesScan: the history served from the
// index's summaries is what a scan of the log gives (counts, failures,
// percentiles), for an approver and for a uid that sees only its own runs.
func TestSkillHistoryFromIndexMatchesScan(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a 150,000-run log")
	}
	f := newBigAuditFixture(t)
	dir := bigAuditLog(t)
	ctx := context.Background()
	for _, who := range []api.Peer{approver, stranger} {
		h, err := f.svc.SkillHistory(ctx, who, service.SkillHistoryParams{Skill: "pdf-tools-2", Bucket: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// The same from a scan of the log.
		type agg struct {
			runs, failExit, failErr int
			durs                    []int64
		}
		want := map[int64]*agg{}
		audit.Read(dir, func(r *audit.Record) error {
			if r.Event != audit.EventRunEnd || r.Skill == nil || r.Skill.Name != "pdf-tools-2" || r.Run == nil {
				return nil
			}
			if who == stranger && (r.Peer == nil || r.Peer.UID != stranger.UID) {
				return nil
			}
			k := r.Time.Truncate(time.Minute).UnixNano()
			if want[k] == nil {
				want[k] = &agg{}
			}
			a := want[k]
			a.runs++
			a.durs = append(a.durs, r.Run.DurationMS)
			if *r.Run.ExitCode != 0 {
				a.failExit++
			}
			return nil
		})
		if len(h.Buckets) != len(want) || len(want) == 0 {
			t.Fatalf("uid %d: %d buckets, the scan has %d", who.UID, len(h.Buckets), len(want))
		}
		for _, b := range h.Buckets {
			a := want[b.Start.UnixNano()]
			if a == nil {
				t.Fatalf("uid %d: bucket %s not in the scan", who.UID, b.Start)
			}
			slices.Sort(a.durs)
			p50 := a.durs[max((50*len(a.durs)+99)/100, 1)-1]
			if b.Runs != a.runs || b.Failures["exit"] != a.failExit || b.P50MS != p50 || b.Start.Location() != time.UTC {
				t.Fatalf("uid %d bucket %s: %+v, scan: %d runs, %d exit failures, p50 %d", who.UID, b.Start, b, a.runs, a.failExit, p50)
			}
		}
		t.Logf("uid %d: %d buckets agree with the scan", who.UID, len(h.Buckets))
	}
}

// TestWarmAuditIndex: the index built at start holds every record, so the
// first search reads only what was appended since; a warm-up given up at
// shutdown leaves the index for the next read to build.
func TestWarmAuditIndex(t *testing.T) {
	dir := t.TempDir()
	l, err := audit.Open(dir, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const runs = 200
	for i := range runs {
		for _, r := range bigRunPair(i) {
			if err := l.Append(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	newService := func() *service.Service {
		return newFixtureOpts(t, true, serviceConfig, nil, func(o *service.Options) { o.Config.Daemon.AuditDir = dir }).svc
	}

	t.Run("cancelled", func(t *testing.T) {
		svc := newService()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := svc.WarmAuditIndex(ctx); err != nil {
			t.Fatalf("a warm-up cut short by shutdown is not an error: %v", err)
		}
		if n := service.AuditIndexed(svc); n != 0 {
			t.Fatalf("a cancelled warm-up kept %d records of a half-read index", n)
		}
		res, err := svc.SearchAudit(context.Background(), stranger, service.AuditSearchParams{})
		if err != nil || res.Matched != 2*runs/100 || !res.Chain.Intact {
			t.Fatalf("search after a cancelled warm-up: %+v, %v", res, err)
		}
	})
	t.Run("warm", func(t *testing.T) {
		svc := newService()
		if err := svc.WarmAuditIndex(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := service.AuditIndexed(svc); n < 2*runs {
			t.Fatalf("the warm index holds %d records, want at least the %d runs' %d", n, runs, 2*runs)
		}
		res, err := svc.SearchAudit(context.Background(), stranger, service.AuditSearchParams{})
		if err != nil || res.Matched != 2*runs/100 || !res.Chain.Intact || !res.OwnOnly {
			t.Fatalf("first search after the warm-up: %+v, %v", res, err)
		}
	})
	t.Run("no log", func(t *testing.T) {
		svc := newFixtureOpts(t, true, serviceConfig, nil, func(o *service.Options) { o.Config.Daemon.AuditDir = t.TempDir() }).svc
		if err := svc.WarmAuditIndex(context.Background()); err != nil {
			t.Fatalf("an empty audit dir: %v", err)
		}
	})
}
