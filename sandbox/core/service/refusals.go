package service

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
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

// refusalAudit budgets the records of refused messages per uid.
type refusalAudit = uidWindows[refusalAggregate]

// refusalAggregate is what the refusals over a uid's budget add up to.
type refusalAggregate struct {
	peer      api.Peer
	transport string
	kinds     map[string]int
}

// AuditRefusal records a message a front end refused, within caller's
// budget (see above). A failure to write is logged: the message was
// refused anyway.
func (s *Service) AuditRefusal(caller api.Peer, r api.Refusal) {
	if !s.journal.Enabled() {
		return
	}
	own := s.refusals.allow(caller.UID, func(a *refusalAggregate) {
		a.peer, a.transport = caller, r.Transport
		a.kinds[r.Kind]++
	})
	if !own {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), refusalAuditTimeout)
	defer cancel()
	if err := s.journal.Record(ctx, refusalRecord(caller, r)); err != nil {
		s.log.Warn("audit of a refused message failed", "transport", r.Transport, "kind", r.Kind, "error", err)
	}
}

func refusalRecord(caller api.Peer, r api.Refusal) *audit.Record {
	rec := &audit.Record{
		Event:     audit.EventCallRefused,
		Peer:      &caller,
		RequestID: AuditRequestID(string(r.ID)),
		Method:    audit.ClipText(r.Method, maxRefusalMethod),
		Outcome:   audit.OutcomeRefused,
		Error:     audit.ClipText(r.Message, maxRefusalMessage),
		Detail: map[string]string{
			"transport":  audit.ClipText(r.Transport, 32),
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
	return newUIDWindows(refusalsPerInterval, interval,
		func() *refusalAggregate { return &refusalAggregate{kinds: map[string]int{}} },
		(*refusalAggregate).record, write)
}

func (a *refusalAggregate) record(span windowSpan) *audit.Record {
	p := a.peer
	kinds := make([]string, 0, len(a.kinds))
	for k, n := range a.kinds {
		kinds = append(kinds, k+"="+strconv.Itoa(n))
	}
	sort.Strings(kinds)
	return &audit.Record{Event: audit.EventCallRefused, Peer: &p, Outcome: audit.OutcomeAggregated,
		Error: strconv.Itoa(span.Folded) + " more messages were refused after the first " + strconv.Itoa(span.Recorded) + " of the interval were recorded; they were only counted",
		Detail: span.detail(map[string]string{
			"transport": audit.ClipText(a.transport, 32), "refusals": strconv.Itoa(span.Folded), "recorded": strconv.Itoa(span.Recorded),
			"kinds": strings.Join(kinds, " "),
		})}
}
