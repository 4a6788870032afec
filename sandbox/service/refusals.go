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

// A front end that refuses a message before it becomes a call (MCP's line
// guard: not JSON, a member named twice, over-long) audits it through
// AuditRefusal as call.refused, like the socket's refused calls. A client
// looping on bad lines must not grow the log at its speed: per uid and
// audit aggregate_interval, the first refusalsPerInterval are recorded one
// by one, before the client is answered; the rest are counted by kind and
// summed up in one call.refused record (outcome "aggregated") when the
// interval ends or FlushAudit runs.

// refusalsPerInterval is how many refusals of one uid per interval get a
// record of their own (the socket's per-connection cap is 64 too).
const refusalsPerInterval = 64

// refusalAuditTimeout bounds the wait for a refusal's record.
const refusalAuditTimeout = 10 * time.Second

// Bounds on client-controlled text in refusal records.
const (
	maxRefusalMethod  = 128
	maxRefusalMessage = 512
)

type refusalWindow struct {
	start     time.Time
	recorded  int
	peer      api.Peer
	transport string
	count     int
	kinds     map[string]int
	timer     *time.Timer
}

type refusalAudit struct {
	mu       sync.Mutex
	interval time.Duration
	uids     map[uint32]*refusalWindow
	write    func(*audit.Record)
}

// AuditRefusal records a message a front end refused, within caller's
// budget (see above). A failure to write is logged: the message was
// refused anyway.
func (s *Service) AuditRefusal(caller api.Peer, r api.Refusal) {
	if s.audit == nil {
		return
	}
	if !s.refusals.allow(caller, r) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), refusalAuditTimeout)
	defer cancel()
	if err := s.audit.Append(ctx, refusalRecord(caller, r)); err != nil {
		s.log.Warn("audit of a refused message failed", "transport", r.Transport, "kind", r.Kind, "error", err)
	}
}

func refusalRecord(caller api.Peer, r api.Refusal) *audit.Record {
	rec := &audit.Record{
		Event:     audit.EventCallRefused,
		Peer:      &caller,
		RequestID: AuditRequestID(string(r.ID)),
		Method:    ClipText(r.Method, maxRefusalMethod),
		Outcome:   audit.OutcomeRefused,
		Error:     ClipText(r.Message, maxRefusalMessage),
		Detail: map[string]string{
			"transport":  ClipText(r.Transport, 32),
			"kind":       r.Kind,
			"code":       strconv.Itoa(r.Code),
			"line_bytes": strconv.Itoa(r.LineBytes),
		},
	}
	if r.LineSHA256 != "" {
		rec.Detail["line_sha256"] = r.LineSHA256
	}
	return rec
}

func newRefusalAudit(interval time.Duration, write func(*audit.Record)) *refusalAudit {
	if interval <= 0 {
		interval = time.Minute
	}
	return &refusalAudit{interval: interval, uids: map[uint32]*refusalWindow{}, write: write}
}

// allow reports whether a refusal of caller gets a record of its own; when
// not, it has been counted for the interval's aggregate record.
func (a *refusalAudit) allow(caller api.Peer, r api.Refusal) bool {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.uids[caller.UID]
	if w == nil || now.Sub(w.start) >= a.interval {
		if w != nil && w.count > 0 {
			w.timer.Stop()
			go a.write(w.record(now))
		}
		w = &refusalWindow{start: now}
		a.uids[caller.UID] = w
	}
	if w.recorded < refusalsPerInterval {
		w.recorded++
		return true
	}
	if w.count == 0 {
		w.kinds = map[string]int{}
		uid, win := caller.UID, w
		w.timer = time.AfterFunc(w.start.Add(a.interval).Sub(now), func() { a.flush(uid, win) })
	}
	w.peer, w.transport = caller, r.Transport
	w.count++
	w.kinds[r.Kind]++
	return false
}

// flush writes win's aggregate if it is still uid's pending window.
func (a *refusalAudit) flush(uid uint32, win *refusalWindow) {
	a.mu.Lock()
	if a.uids[uid] != win || win.count == 0 {
		a.mu.Unlock()
		return
	}
	delete(a.uids, uid)
	rec := win.record(time.Now())
	a.mu.Unlock()
	a.write(rec)
}

// flushAll writes every pending aggregate (at shutdown).
func (a *refusalAudit) flushAll() {
	a.mu.Lock()
	var recs []*audit.Record
	for uid, w := range a.uids {
		if w.count > 0 {
			w.timer.Stop()
			recs = append(recs, w.record(time.Now()))
		}
		delete(a.uids, uid)
	}
	a.mu.Unlock()
	for _, rec := range recs {
		a.write(rec)
	}
}

func (w *refusalWindow) record(end time.Time) *audit.Record {
	p := w.peer
	kinds := make([]string, 0, len(w.kinds))
	for k, n := range w.kinds {
		kinds = append(kinds, k+"="+strconv.Itoa(n))
	}
	sort.Strings(kinds)
	return &audit.Record{Event: audit.EventCallRefused, Peer: &p, Outcome: audit.OutcomeAggregated,
		Error: strconv.Itoa(w.count) + " more messages were refused after the first " + strconv.Itoa(w.recorded) + " of the interval were recorded; they were only counted",
		Detail: map[string]string{
			"transport": ClipText(w.transport, 32), "refusals": strconv.Itoa(w.count), "recorded": strconv.Itoa(w.recorded),
			"kinds":        strings.Join(kinds, " "),
			"window_start": w.start.UTC().Format(time.RFC3339Nano), "window_end": end.UTC().Format(time.RFC3339Nano),
		}}
}
