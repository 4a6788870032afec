package egress

import (
	"sync"
	"time"
)

// A script can make attempts in a loop (denied names, refused
// connections, mismatched hosts), and each report becomes an fsynced
// audit record: unbounded, that fills the audit disk for every user. So a
// run reports its first ReportsPerRun attempts one by one, each also
// taking from its uid's shared Budget; the rest are counted, by kind,
// destination and outcome, and reported as one "aggregate" attempt per
// AggregateInterval and at Shutdown. Nothing is dropped: every attempt is
// either reported or counted in an aggregate.

// DefaultReportsPerRun is how many attempts a run reports one by one.
const DefaultReportsPerRun = 64

// DefaultAggregateInterval is how often a run's pending aggregate is
// reported while it lasts.
const DefaultAggregateInterval = time.Minute

// maxAggregateKeys bounds the distinct (kind, destination, outcome)
// entries of one aggregate; the rest are counted in Unlisted.
const maxAggregateKeys = 16

// Budget is shared by the runs of one uid: Take reports whether one more
// attempt may be reported one by one.
type Budget interface {
	Take() bool
}

// AttemptCount is one line of an aggregate: how many attempts of a kind to
// a destination ended the same way. Reason is the first one's.
type AttemptCount struct {
	Kind    string `json:"kind"`
	Host    string `json:"host,omitempty"`
	Address string `json:"address,omitempty"`
	Port    uint16 `json:"port,omitempty"`
	Allowed bool   `json:"allowed"`
	Limit   string `json:"limit,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Count   int    `json:"count"`
}

type aggKey struct {
	kind, host, address string
	port                uint16
	allowed             bool
	limit               string
}

// reportGate passes a run's attempts to Config.Report within its budgets.
type reportGate struct {
	report   func(Attempt)
	uid      Budget
	interval time.Duration

	mu      sync.Mutex
	left    int
	pending Attempt // the aggregate being counted (Count 0: none)
	keys    map[aggKey]int
	timer   *time.Timer
	flushes sync.WaitGroup
}

func newReportGate(cfg Config) *reportGate {
	g := &reportGate{report: cfg.Report, uid: cfg.UIDBudget, interval: cfg.AggregateInterval, left: cfg.ReportsPerRun}
	if g.left <= 0 {
		g.left = DefaultReportsPerRun
	}
	if g.interval <= 0 {
		g.interval = DefaultAggregateInterval
	}
	return g
}

// send reports a, or counts it in the pending aggregate.
func (g *reportGate) send(a Attempt) {
	if g.report == nil {
		return
	}
	g.mu.Lock()
	if g.left > 0 && (g.uid == nil || g.uid.Take()) {
		g.left--
		g.mu.Unlock()
		g.report(a)
		return
	}
	defer g.mu.Unlock()
	g.fold(a)
	if g.timer == nil {
		g.flushes.Add(1)
		g.timer = time.AfterFunc(g.interval, func() {
			defer g.flushes.Done()
			g.flush(false)
		})
	}
}

// fold counts a in the pending aggregate.
func (g *reportGate) fold(a Attempt) {
	p := &g.pending
	if p.Count == 0 {
		*p = Attempt{Kind: "aggregate", Rule: "aggregate"}
		g.keys = map[aggKey]int{}
	}
	p.Count++
	p.Out += a.Out
	p.In += a.In
	p.DurationMS += a.DurationMS
	if a.Allowed {
		p.Allowed = true // some of them were
	}
	k := aggKey{a.Kind, a.Host, a.Address, a.Port, a.Allowed, a.Limit}
	if i, ok := g.keys[k]; ok {
		p.Aggregate[i].Count++
		return
	}
	if len(p.Aggregate) >= maxAggregateKeys {
		p.Unlisted++
		return
	}
	g.keys[k] = len(p.Aggregate)
	reason := a.Reason
	if reason == "" {
		reason = a.Error
	}
	p.Aggregate = append(p.Aggregate, AttemptCount{Kind: a.Kind, Host: a.Host, Address: a.Address, Port: a.Port,
		Allowed: a.Allowed, Limit: a.Limit, Reason: truncate(reason, 300), Count: 1})
}

// flush reports the pending aggregate, if any. final stops the timer (a
// flush it had started is waited for).
func (g *reportGate) flush(final bool) {
	g.mu.Lock()
	if final && g.timer != nil && g.timer.Stop() {
		g.flushes.Done()
	}
	g.timer = nil
	a := g.pending
	g.pending, g.keys = Attempt{}, nil
	g.mu.Unlock()
	if a.Count > 0 {
		g.report(a)
	}
}

// flushAll reports what is pending once the run is over.
func (g *reportGate) flushAll() {
	if g.report == nil {
		return
	}
	g.flush(true)
	g.flushes.Wait()
	g.flush(true) // what a send raced in after the first
}
