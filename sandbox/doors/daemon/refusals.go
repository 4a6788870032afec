package daemon

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// Connections turned away for a limit (too many in all, too many of one
// uid) are audited per uid and interval: the first refusal of a uid in an
// interval gets its own call.refused record at once, the rest are counted
// and summed up in one record (outcome "aggregated") when the interval
// ends. A uid that reconnects in a loop thus adds at most two records per
// interval, yet every refusal is accounted for.
type connRefusals struct {
	mu       sync.Mutex
	interval time.Duration
	uids     map[uint32]*connTally
	write    func(*audit.Record)
}

type connTally struct {
	peer   api.Peer
	start  time.Time
	count  int
	reason string
	timer  *time.Timer
}

func newConnRefusals(interval time.Duration, write func(*audit.Record)) *connRefusals {
	if interval <= 0 {
		interval = time.Minute
	}
	return &connRefusals{interval: interval, uids: map[uint32]*connTally{}, write: write}
}

// refused is jsonrpc.ServerOptions.OnConnRefused; it must not block.
func (c *connRefusals) refused(p api.Peer, reason string) {
	c.mu.Lock()
	t := c.uids[p.UID]
	if t == nil {
		now := time.Now()
		t = &connTally{peer: p, start: now}
		c.uids[p.UID] = t
		uid := p.UID
		t.timer = time.AfterFunc(c.interval, func() { c.flush(uid, t) })
		c.mu.Unlock()
		go c.write(connRecord(p, reason, 1, audit.OutcomeRefused, now, now))
		return
	}
	t.count++
	t.peer, t.reason = p, reason
	c.mu.Unlock()
}

func (c *connRefusals) flush(uid uint32, t *connTally) {
	c.mu.Lock()
	if c.uids[uid] != t {
		c.mu.Unlock()
		return
	}
	delete(c.uids, uid)
	c.mu.Unlock()
	if t.count > 0 {
		c.write(connRecord(t.peer, t.reason, t.count, audit.OutcomeAggregated, t.start, time.Now()))
	}
}

func (c *connRefusals) flushAll() {
	c.mu.Lock()
	var ts []*connTally
	for uid, t := range c.uids {
		t.timer.Stop()
		delete(c.uids, uid)
		if t.count > 0 {
			ts = append(ts, t)
		}
	}
	c.mu.Unlock()
	for _, t := range ts {
		c.write(connRecord(t.peer, t.reason, t.count, audit.OutcomeAggregated, t.start, time.Now()))
	}
}

func connRecord(p api.Peer, reason string, n int, outcome string, start, end time.Time) *audit.Record {
	return &audit.Record{Event: audit.EventCallRefused, Peer: &p, Outcome: outcome, Error: reason,
		Detail: map[string]string{
			"what": "connection", "connections": strconv.Itoa(n),
			"window_start": start.UTC().Format(time.RFC3339Nano), "window_end": end.UTC().Format(time.RFC3339Nano),
		}}
}

func (d *Daemon) writeRefusal(r *audit.Record) {
	if !d.audit.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), refusedAuditTimeout)
	defer cancel()
	if err := d.audit.Record(ctx, r); err != nil {
		d.log.Warn("audit of refused connections failed", "uid", r.Peer.UID, "error", err)
	}
}

// FlushRefused writes the aggregated records of refused connections still
// pending; `skillbox serve` calls it when it stops.
func (d *Daemon) FlushRefused() { d.conns.flushAll() }
