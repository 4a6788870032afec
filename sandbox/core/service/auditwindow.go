package service

import (
	"sync"
	"time"

	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// uidWindows is the one budget of audit records for events a caller can
// repeat in a loop (reads, refused messages): per uid and interval, the
// first budget events get records of their own; the rest are folded into
// an aggregate A whose one record is written when the interval ends, when
// the uid's next event opens a new interval, or at flushAll. So no uid can
// grow the log at its own speed, and nothing goes uncounted.
type uidWindows[A any] struct {
	budget   int
	interval time.Duration
	fresh    func() *A
	record   func(agg *A, span windowSpan) *audit.Record
	write    func(*audit.Record)

	mu   sync.Mutex
	uids map[uint32]*uidWindow[A]
}

// windowSpan is what an aggregate record says of its interval.
type windowSpan struct {
	Start, End time.Time
	Recorded   int // events recorded one by one in the interval
	Folded     int // events folded into the aggregate
}

type uidWindow[A any] struct {
	start    time.Time
	recorded int
	folded   int
	agg      *A
	timer    *time.Timer
}

func newUIDWindows[A any](budget int, interval time.Duration, fresh func() *A, record func(*A, windowSpan) *audit.Record, write func(*audit.Record)) *uidWindows[A] {
	if interval <= 0 {
		interval = time.Minute
	}
	return &uidWindows[A]{budget: budget, interval: interval, fresh: fresh, record: record, write: write, uids: map[uint32]*uidWindow[A]{}}
}

// allow reports whether an event of uid gets a record of its own; when
// not, fold has added it to the interval's aggregate.
func (u *uidWindows[A]) allow(uid uint32, fold func(*A)) bool {
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	w := u.uids[uid]
	if w == nil || now.Sub(w.start) >= u.interval {
		if w != nil && w.folded > 0 {
			w.timer.Stop()
			go u.write(u.recordOf(w, now))
		}
		w = &uidWindow[A]{start: now}
		u.uids[uid] = w
	}
	if w.recorded < u.budget {
		w.recorded++
		return true
	}
	if w.folded == 0 {
		w.agg = u.fresh()
		win := w
		w.timer = time.AfterFunc(w.start.Add(u.interval).Sub(now), func() { u.flush(uid, win) })
	}
	w.folded++
	fold(w.agg)
	return false
}

func (u *uidWindows[A]) recordOf(w *uidWindow[A], end time.Time) *audit.Record {
	return u.record(w.agg, windowSpan{Start: w.start, End: end, Recorded: w.recorded, Folded: w.folded})
}

// flush writes win's aggregate if it is still uid's pending window.
func (u *uidWindows[A]) flush(uid uint32, win *uidWindow[A]) {
	u.mu.Lock()
	if u.uids[uid] != win || win.folded == 0 {
		u.mu.Unlock()
		return
	}
	delete(u.uids, uid)
	rec := u.recordOf(win, time.Now())
	u.mu.Unlock()
	u.write(rec)
}

// flushAll writes every pending aggregate (at shutdown).
func (u *uidWindows[A]) flushAll() {
	u.mu.Lock()
	var recs []*audit.Record
	now := time.Now()
	for uid, w := range u.uids {
		if w.folded > 0 {
			w.timer.Stop()
			recs = append(recs, u.recordOf(w, now))
		}
		delete(u.uids, uid)
	}
	u.mu.Unlock()
	for _, rec := range recs {
		u.write(rec)
	}
}

// detail adds the interval's bounds to an aggregate record's detail.
func (s windowSpan) detail(d map[string]string) map[string]string {
	d["window_start"] = s.Start.UTC().Format(time.RFC3339Nano)
	d["window_end"] = s.End.UTC().Format(time.RFC3339Nano)
	return d
}
