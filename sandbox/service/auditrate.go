package service

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/audit"
)

// A uid reading in a loop must not be able to grow the audit log at disk
// speed: each uid's successful reads (and the allow decisions before them)
// are recorded one by one up to a budget per interval (audit
// reads_per_interval, aggregate_interval); the rest of the interval's
// reads are summed up in one skills.read record (outcome "aggregated")
// written when the interval ends. Refused reads and denies are always
// recorded one by one.

// maxAggregatedPaths bounds the paths an aggregated record names.
const maxAggregatedPaths = 16

type readWindow struct {
	start    time.Time
	recorded int
	peer     api.Peer
	count    int
	bytes    int64
	skills   map[string]bool
	paths    map[string]bool
	more     int // distinct paths beyond maxAggregatedPaths
	timer    *time.Timer
}

type readAudit struct {
	mu       sync.Mutex
	budget   int
	interval time.Duration
	uids     map[uint32]*readWindow
	write    func(*audit.Record)
}

func newReadAudit(budget int, interval time.Duration, write func(*audit.Record)) *readAudit {
	if budget <= 0 {
		budget = 20
	}
	if interval <= 0 {
		interval = time.Minute
	}
	return &readAudit{budget: budget, interval: interval, uids: map[uint32]*readWindow{}, write: write}
}

// allow reports whether a successful read of caller is recorded in full;
// when not, it has been counted for the interval's aggregate record.
func (r *readAudit) allow(caller api.Peer, skill, path string, served int64) bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.uids[caller.UID]
	if w == nil || now.Sub(w.start) >= r.interval {
		if w != nil && w.count > 0 {
			w.timer.Stop()
			go r.write(w.record(now))
		}
		w = &readWindow{start: now}
		r.uids[caller.UID] = w
	}
	if w.recorded < r.budget {
		w.recorded++
		return true
	}
	if w.count == 0 {
		w.skills, w.paths = map[string]bool{}, map[string]bool{}
		uid, win := caller.UID, w
		w.timer = time.AfterFunc(w.start.Add(r.interval).Sub(now), func() { r.flush(uid, win) })
	}
	w.peer = caller
	w.count++
	w.bytes += served
	w.skills[skill] = true
	if !w.paths[skill+":"+path] {
		if len(w.paths) < maxAggregatedPaths {
			w.paths[skill+":"+path] = true
		} else {
			w.more++
		}
	}
	return false
}

// flush writes win's aggregate if it is still uid's pending window.
func (r *readAudit) flush(uid uint32, win *readWindow) {
	r.mu.Lock()
	if r.uids[uid] != win || win.count == 0 {
		r.mu.Unlock()
		return
	}
	delete(r.uids, uid)
	rec := win.record(time.Now())
	r.mu.Unlock()
	r.write(rec)
}

// flushAll writes every pending aggregate (at shutdown).
func (r *readAudit) flushAll() {
	r.mu.Lock()
	var recs []*audit.Record
	for uid, w := range r.uids {
		if w.count > 0 {
			w.timer.Stop()
			recs = append(recs, w.record(time.Now()))
		}
		delete(r.uids, uid)
	}
	r.mu.Unlock()
	for _, rec := range recs {
		r.write(rec)
	}
}

func (w *readWindow) record(end time.Time) *audit.Record {
	p := w.peer
	keys := func(m map[string]bool) string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	d := map[string]string{
		"reads":        strconv.Itoa(w.count),
		"bytes":        strconv.FormatInt(w.bytes, 10),
		"skills":       keys(w.skills),
		"paths":        keys(w.paths),
		"window_start": w.start.UTC().Format(time.RFC3339Nano),
		"window_end":   end.UTC().Format(time.RFC3339Nano),
	}
	if w.more > 0 {
		d["paths_unlisted"] = strconv.Itoa(w.more)
	}
	return &audit.Record{Event: audit.EventSkillRead, Method: api.MethodSkillsRead, Peer: &p, Outcome: audit.OutcomeAggregated,
		Detail: d}
}

// FlushAudit writes the aggregated records still pending (reads and front
// end refusals over the per-uid budget); the daemon and skillbox mcp call
// it when they stop.
func (s *Service) FlushAudit() {
	s.reads.flushAll()
	s.refusals.flushAll()
}

func (s *Service) writeAggregate(r *audit.Record) {
	if s.audit == nil {
		return
	}
	if err := s.audit.Append(context.Background(), r); err != nil {
		s.log.Error("audit append failed", "event", r.Event, "outcome", r.Outcome, "error", err)
	}
}
