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

// A uid reading in a loop must not be able to grow the audit log at disk
// speed: each uid's successful reads (and the allow decisions before them)
// are recorded one by one up to a budget per interval (audit
// reads_per_interval, aggregate_interval); the rest of the interval's
// reads are summed up in one skills.read record (outcome "aggregated")
// written when the interval ends. Refused reads and denies are always
// recorded one by one.

// maxAggregatedPaths bounds the paths an aggregated record names.
const maxAggregatedPaths = 16

// readAudit budgets the records of successful reads per uid.
type readAudit = uidWindows[readAggregate]

// readAggregate is what the reads over a uid's budget add up to.
type readAggregate struct {
	peer   api.Peer
	bytes  int64
	skills map[string]bool
	paths  map[string]bool
	more   int // distinct paths beyond maxAggregatedPaths
}

func newReadAudit(budget int, interval time.Duration, write func(*audit.Record)) *readAudit {
	if budget <= 0 {
		budget = 20
	}
	return newUIDWindows(budget, interval,
		func() *readAggregate { return &readAggregate{skills: map[string]bool{}, paths: map[string]bool{}} },
		(*readAggregate).record, write)
}

// allowRead reports whether a successful read of caller is recorded in
// full; when not, it has been counted for the interval's aggregate record.
func (s *Service) allowRead(caller api.Peer, skill, path string, served int64) bool {
	return s.reads.allow(caller.UID, func(a *readAggregate) {
		a.peer = caller
		a.bytes += served
		a.skills[skill] = true
		if key := skill + ":" + path; !a.paths[key] {
			if len(a.paths) < maxAggregatedPaths {
				a.paths[key] = true
			} else {
				a.more++
			}
		}
	})
}

func (a *readAggregate) record(span windowSpan) *audit.Record {
	p := a.peer
	keys := func(m map[string]bool) string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	d := span.detail(map[string]string{
		"reads":  strconv.Itoa(span.Folded),
		"bytes":  strconv.FormatInt(a.bytes, 10),
		"skills": keys(a.skills),
		"paths":  keys(a.paths),
	})
	if a.more > 0 {
		d["paths_unlisted"] = strconv.Itoa(a.more)
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
	_ = s.journal.Record(context.Background(), r) // a failure is logged there
}
