package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
)

// sessionSettle is how long the bench waits (untimed) between two timed
// runs in one session sandbox, so that the supervisor has started the
// interpreter the next run takes: the steady state of a session whose
// model thinks between calls, as the warm figures wait for the pool.
const sessionSettle = 400 * time.Millisecond

// sessions measures isolation = "session": run_script of hello.py in a
// session's own sandbox, end to end on the socket, against a native
// python3 start, the fresh-sandbox warm run and the cold run; n clients'
// throughput in n session sandboxes; and pause (checkpoint), resume
// (restore) and fork of an idle python session, with the disk one
// checkpoint takes.
func (b *bench) sessions(ctx context.Context, n int, cold, native float64) error {
	rd, sock, cleanup, err := b.daemonFixtureWith(ctx, "runsc", func(cfg *policy.Config) {
		cfg.Rules = append(cfg.Rules, &policy.Rule{Name: "bench-sessions", Skills: []string{"*"}, Isolation: policy.IsolationSession})
		cfg.Pool.PerKey = 0
		cfg.Sessions.IdleTimeout = 0
	})
	if err != nil {
		return err
	}
	defer cleanup()
	_ = rd
	cl, sid, err := dialLoaded(ctx, sock)
	if err != nil {
		return err
	}
	defer cl.Close()
	// The first run boots the session's sandbox.
	t0 := time.Now()
	if _, err := runHello(ctx, cl, sid); err != nil {
		return err
	}
	boot := time.Since(t0)
	var ds []time.Duration
	for i := 0; i < n; i++ {
		time.Sleep(sessionSettle)
		t := time.Now()
		if _, err := runHello(ctx, cl, sid); err != nil {
			return err
		}
		ds = append(ds, time.Since(t))
	}
	med := ms(median(ds))
	note := fmt.Sprintf("n=%d, p90 %.1f ms, first run (boots the sandbox) %.0f ms", n, ms(pct(ds, 0.9)), ms(boot))
	b.add(Figure{Name: "session run_script hello.py, runsc (p50)", Value: med, Unit: "ms", Baseline: "native python3", Ratio: med / native, Note: note + ", goal <= 1x"})
	if b.warm > 0 {
		b.add(Figure{Name: "session run_script hello.py, runsc (p50)", Value: med, Unit: "ms", Baseline: "warm fresh-sandbox run", Ratio: med / b.warm})
	}
	if cold > 0 {
		b.add(Figure{Name: "session run_script hello.py, runsc (p50)", Value: med, Unit: "ms", Baseline: "cold runsc run", Ratio: med / cold})
	}

	// Pause, resume, fork of this idle session.
	var paused api.PauseSessionResult
	t := time.Now()
	if err := cl.Call(ctx, api.MethodSessionsPause, api.SessionParams{SessionID: sid}, &paused); err != nil {
		return err
	}
	pauseTook := time.Since(t)
	if len(paused.Sandboxes) != 1 {
		return fmt.Errorf("sessions.pause paused %d sandboxes, want 1", len(paused.Sandboxes))
	}
	p := paused.Sandboxes[0]
	b.add(Figure{Name: "checkpoint of an idle python session", Value: float64(p.DurationMS), Unit: "ms", Note: fmt.Sprintf("runsc checkpoint and /work copy; sessions.pause end to end %.0f ms", ms(pauseTook))})
	b.add(Figure{Name: "disk per checkpoint (idle python session)", Value: float64(p.Bytes) / (1 << 20), Unit: "MiB", Note: "memory image and /work copy, uncompressed"})
	t = time.Now()
	var resumed api.ResumeSessionResult
	if err := cl.Call(ctx, api.MethodSessionsResume, api.ResumeSessionParams{SessionID: sid}, &resumed); err != nil {
		return err
	}
	b.add(Figure{Name: "restore of an idle python session", Value: ms(time.Since(t)), Unit: "ms", Note: "sessions.resume end to end: manifest and file hashes checked, /work copied back, runsc restore, interpreters replaced"})
	t = time.Now()
	var forked api.ForkSessionResult
	if err := cl.Call(ctx, api.MethodSessionsFork, api.SessionParams{SessionID: sid}, &forked); err != nil {
		return err
	}
	b.add(Figure{Name: "fork of a live idle python session", Value: ms(time.Since(t)), Unit: "ms", Note: "sessions.fork end to end: checkpoint left running, then a restore into the new session"})
	if err := cl.Call(ctx, api.MethodSessionsClose, api.SessionParams{SessionID: forked.SessionID}, &api.CloseSessionResult{}); err != nil {
		return err
	}
	if err := cl.Call(ctx, api.MethodSessionsClose, api.SessionParams{SessionID: sid}, &api.CloseSessionResult{}); err != nil {
		return err
	}

	// Throughput: conc clients, each in its own session sandbox.
	for _, conc := range b.o.Concurrency {
		if err := b.sessionThroughput(ctx, sock, conc, n, cold); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) sessionThroughput(ctx context.Context, sock string, conc, perClient int, cold float64) error {
	clients := make([]loadClient, conc)
	for i := range clients {
		cl, sid, err := dialLoaded(ctx, sock)
		if err != nil {
			return err
		}
		defer cl.Close()
		if _, err := runHello(ctx, cl, sid); err != nil { // boots its sandbox
			return err
		}
		clients[i] = loadClient{cl, sid}
	}
	time.Sleep(sessionSettle)
	l, err := runLoad(ctx, clients, perClient)
	if err != nil {
		return err
	}
	ds, el, cpu := l.ds, l.elapsed, l.cpu
	total := conc * perClient
	rate := float64(total) / el.Seconds()
	f := Figure{Name: fmt.Sprintf("throughput, %d clients in %d session sandboxes", conc, conc), Value: rate, Unit: "runs/s",
		Note: fmt.Sprintf("%d runs in %.1f s; p50 %.0f p90 %.0f p99 %.0f ms; host CPU %.0f ms/run; goal >= 4x",
			total, el.Seconds(), ms(median(ds)), ms(pct(ds, 0.9)), ms(pct(ds, 0.99)), ms(cpu)/float64(total))}
	if cold > 0 {
		f.Baseline, f.Ratio = "sequential cold runsc runs/s", rate/(1000/cold)
	}
	b.add(f)
	for _, c := range clients {
		_ = c.cl.Call(ctx, api.MethodSessionsClose, api.SessionParams{SessionID: c.sid}, &api.CloseSessionResult{})
	}
	return nil
}
