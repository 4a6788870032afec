package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
)

// observabilityGoal is the bound on what metrics and traces may add
// to the warm run_script p50.
const observabilityGoal = 1.02

// observability measures the warm run_script p50 of two daemons in one
// run: one with metrics and traces off, one with both on (metrics on a
// Unix socket, every call traced, spans sent over OTLP/HTTP to a collector
// on loopback that takes and drops them). Their runs alternate (and
// which goes first), each once both pools are full, so neither run
// competes with a refill and load on the machine falls on both alike.
func (b *bench) observability(ctx context.Context, rt string, n int) error {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse
	}))
	defer sink.Close()
	traces, err := policy.ParseTracesEndpoint(sink.URL)
	if err != nil {
		return err
	}
	type side struct {
		rd  *stack.Serving
		cl  *client.Client
		sid string
		ds  []time.Duration
	}
	open := func(on bool) (*side, func(), error) {
		change := func(*policy.Config) {}
		if on {
			change = func(cfg *policy.Config) {
				cfg.Daemon.Metrics = policy.MetricsAddress{Network: "unix", Address: filepath.Join(filepath.Dir(cfg.Daemon.Socket), "metrics.sock")}
				cfg.Daemon.Traces, cfg.Daemon.TracesSample = traces, 1
			}
		}
		rd, sock, cleanup, err := b.daemonFixtureWith(ctx, rt, change)
		if err != nil {
			return nil, nil, err
		}
		cl, sid, err := dialLoaded(ctx, sock)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		return &side{rd: rd, cl: cl, sid: sid}, func() { cl.Close(); cleanup() }, nil
	}
	off, closeOff, err := open(false)
	if err != nil {
		return err
	}
	defer closeOff()
	on, closeOn, err := open(true)
	if err != nil {
		return err
	}
	defer closeOn()
	full := max(1, b.o.Pool)
	for i := 0; i < n+1; i++ {
		order := []*side{off, on}
		if i%2 == 1 {
			order = []*side{on, off}
		}
		for _, s := range order {
			// Both pools full: no refill of the other daemon's pool
			// competes with the timed run.
			for _, o := range order {
				if err := waitIdle(ctx, o.rd, full); err != nil {
					return err
				}
			}
			t := time.Now()
			if _, err := runHello(ctx, s.cl, s.sid); err != nil {
				return err
			}
			if i > 0 { // the first run also pins the skill
				s.ds = append(s.ds, time.Since(t))
			}
		}
	}
	offP50, onP50 := ms(median(off.ds)), ms(median(on.ds))
	b.add(Figure{Name: "warm run_script, metrics+traces off (p50)", Value: offP50, Unit: "ms",
		Note: fmt.Sprintf("n=%d, p90 %.1f ms, %s", n, ms(pct(off.ds, 0.9)), rt)})
	b.add(Figure{Name: "warm run_script, metrics+traces on (p50)", Value: onP50, Unit: "ms", Baseline: "metrics+traces off", Ratio: onP50 / offP50,
		Note: fmt.Sprintf("n=%d, p90 %.1f ms, runs alternating, goal < %.2fx", n, ms(pct(on.ds, 0.9)), observabilityGoal)})
	return nil
}
