package service

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// The audit views (the console's search and per-skill history) read the
// daemon's log under the same rule as everything else: approvers see every
// record, anyone else only the records of their own runs (run.*, by the
// record's peer uid) and nothing else.

// Bounds of an audit search's answer.
const (
	DefaultAuditLimit = 200
	MaxAuditLimit     = 5000
)

// AuditSearchParams is an audit search: the filter, and how many of the
// newest matching records to return (0: DefaultAuditLimit).
type AuditSearchParams struct {
	Filter audit.Filter
	Limit  int
	// FullVerify verifies the whole chain again instead of only what was
	// appended since the last read. Only approvers may ask, and their
	// searches do it anyway; for anyone else it is refused.
	FullVerify bool
}

// AuditSearchResult holds the newest matching records, oldest first, and
// the chain's state. Matched counts every match, so a reader sees when
// Records holds only the newest Limit of them.
type AuditSearchResult struct {
	Records []*audit.Record `json:"records"`
	Matched int             `json:"matched"`
	// OwnOnly says the caller is no approver and sees its own runs only.
	OwnOnly bool        `json:"own_only"`
	Chain   ChainStatus `json:"chain"`
}

// ChainStatus is the verification of the log's chains (audit.VerifyAll,
// accepting a log whose oldest files retention removed).
type ChainStatus struct {
	Intact  bool   `json:"intact"`
	Chains  int    `json:"chains"`
	Records uint64 `json:"records"`
	// Finding says where the first chain broke, or why it could not be
	// read.
	Finding string `json:"finding,omitempty"`
}

func (s *Service) auditDir() (string, error) {
	if s.cfg.Daemon.AuditDir == "" {
		return "", errkind.Errorf(errkind.Unavailable, "this skillbox keeps no audit log (daemon.audit_dir is not set)")
	}
	return s.cfg.Daemon.AuditDir, nil
}

// visible reports whether caller may see r.
func visible(approver bool, caller api.Peer, r *audit.Record) bool {
	if approver {
		return true
	}
	return r.Peer != nil && r.Peer.UID == caller.UID && strings.HasPrefix(r.Event, "run.")
}

// SearchAudit returns the records of the log that match p and the caller
// may see, with the chain's verification.
func (s *Service) SearchAudit(ctx context.Context, caller api.Peer, p AuditSearchParams) (*AuditSearchResult, error) {
	dir, err := s.auditDir()
	if err != nil {
		return nil, err
	}
	limit := p.Limit
	switch {
	case limit == 0:
		limit = DefaultAuditLimit
	case limit < 0 || limit > MaxAuditLimit:
		return nil, errkind.Errorf(errkind.InvalidParams, "limit %d: give 1 to %d (narrow the filter for more)", limit, MaxAuditLimit)
	}
	approver := s.IsApprover(caller)
	if p.FullVerify && !approver {
		return nil, errkind.Errorf(errkind.Denied, "a full verify of the audit log is for approvers (daemon.approvers); uid %d searches with the incremental verification", caller.UID)
	}
	release, err := s.auditReads.acquire(caller, approver)
	if err != nil {
		return nil, err
	}
	defer release()
	out := &AuditSearchResult{Records: []*audit.Record{}, OwnOnly: !approver}
	x, err := s.auditIndexFor(dir)
	if err != nil && !errors.Is(err, audit.ErrNoLog) {
		return nil, errkind.Errorf(errkind.Internal, "reading the audit log: %v", err)
	}
	if x != nil {
		if err := x.refresh(); err != nil {
			return nil, errkind.Errorf(errkind.Internal, "reading the audit log: %v", err)
		}
		out.Records, out.Matched, out.Chain, err = x.query(ctx, approver, caller, p.Filter, limit)
		if err != nil {
			return nil, errkind.Errorf(errkind.Internal, "reading the audit log: %v", err)
		}
		// An approver's search verifies the whole chain, as before the
		// index: a line rewritten in place behind the verified position is
		// invisible to the incremental check. Approvers' reads are few and
		// capped (auditReads); everyone else pays only for what was
		// appended since.
		if approver || p.FullVerify {
			out.Chain = verifyChains(dir)
		}
		return out, nil
	}
	err = audit.Read(dir, func(r *audit.Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !p.Filter.Match(r) || !visible(approver, caller, r) {
			return nil
		}
		out.Matched++
		if len(out.Records) == limit {
			out.Records = slices.Delete(out.Records, 0, 1)
		}
		out.Records = append(out.Records, r)
		return nil
	})
	if err != nil {
		return nil, errkind.Errorf(errkind.Internal, "reading the audit log: %v", err)
	}
	out.Chain = verifyChains(dir)
	return out, nil
}

func verifyChains(dir string) ChainStatus {
	results, err := audit.VerifyAll(dir, audit.VerifyOptions{Partial: true})
	st := ChainStatus{Chains: len(results), Intact: err == nil}
	for _, r := range results {
		if r.Report != nil {
			st.Records += r.Report.Records
		}
		if st.Finding == "" && r.Failure != nil {
			st.Intact, st.Finding = false, chainName(r.Name)+r.Failure.Error()
		} else if st.Finding == "" && r.Err != nil {
			st.Intact, st.Finding = false, chainName(r.Name)+r.Err.Error()
		}
	}
	var te *audit.TamperError
	if st.Finding == "" && err != nil {
		st.Finding = err.Error()
		if errors.As(err, &te) {
			st.Finding = te.Error()
		}
	}
	return st
}

func chainName(n string) string {
	if n == "" {
		return ""
	}
	return "chain " + n + ": "
}

// SkillHistoryParams asks for one skill's runs from Since to Until (zero:
// the whole log; until now) in buckets of Bucket (0: one hour).
type SkillHistoryParams struct {
	Skill        string
	Since, Until time.Time
	Bucket       time.Duration
}

// MaxHistoryBuckets bounds a history's buckets (a year of hours fits).
const MaxHistoryBuckets = 10000

// SkillHistory is a skill's runs per time bucket, for charts.
type SkillHistory struct {
	Skill   string          `json:"skill"`
	Bucket  string          `json:"bucket"` // a Go duration
	OwnOnly bool            `json:"own_only"`
	Buckets []HistoryBucket `json:"buckets"`
}

// HistoryBucket sums up the runs that ended in [Start, Start+bucket).
type HistoryBucket struct {
	Start time.Time `json:"start"`
	Runs  int       `json:"runs"`
	// Failures counts failed runs by reason: the runtime's (timeout, oom,
	// pids, output_cap, killed), "exit" for a non-zero exit, "error" for a
	// run that did not finish.
	Failures map[string]int `json:"failures"`
	// Duration percentiles of the bucket's runs, in milliseconds.
	P50MS int64 `json:"p50_ms"`
	P90MS int64 `json:"p90_ms"`
	P99MS int64 `json:"p99_ms"`
	// Egress connections attempted and denied by the runs' proxies.
	EgressAttempts int64 `json:"egress_attempts"`
	EgressDenied   int64 `json:"egress_denied"`

	durations []int64
}

// SkillHistory computes a skill's history from the run.end records of the
// log the caller may see.
func (s *Service) SkillHistory(ctx context.Context, caller api.Peer, p SkillHistoryParams) (*SkillHistory, error) {
	dir, err := s.auditDir()
	if err != nil {
		return nil, err
	}
	if p.Skill == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "skill is required")
	}
	if p.Bucket == 0 {
		p.Bucket = time.Hour
	}
	if p.Bucket < time.Minute {
		return nil, errkind.Errorf(errkind.InvalidParams, "bucket %s: give at least 1m", p.Bucket)
	}
	if p.Until.IsZero() {
		p.Until = time.Now()
	}
	if !p.Since.IsZero() && (p.Until.Sub(p.Since)/p.Bucket) > MaxHistoryBuckets {
		return nil, errkind.Errorf(errkind.InvalidParams, "%s to %s in buckets of %s is more than %d buckets: give a larger bucket or a shorter span",
			p.Since.Format(time.RFC3339), p.Until.Format(time.RFC3339), p.Bucket, MaxHistoryBuckets)
	}
	approver := s.IsApprover(caller)
	release, err := s.auditReads.acquire(caller, approver)
	if err != nil {
		return nil, err
	}
	defer release()
	f := audit.Filter{Skill: p.Skill, Event: audit.EventRunEnd, Since: p.Since, Until: p.Until}
	byStart := map[int64]*HistoryBucket{}
	bucket := func(t time.Time) (*HistoryBucket, error) {
		start := t.Truncate(p.Bucket)
		b := byStart[start.UnixNano()]
		if b == nil {
			if len(byStart) == MaxHistoryBuckets {
				return nil, errkind.Errorf(errkind.InvalidParams, "the skill's runs fall in more than %d buckets: give a larger bucket or a shorter span", MaxHistoryBuckets)
			}
			b = &HistoryBucket{Start: start, Failures: map[string]int{}}
			byStart[start.UnixNano()] = b
		}
		return b, nil
	}
	x, err := s.auditIndexFor(dir)
	if err != nil && !errors.Is(err, audit.ErrNoLog) {
		return nil, errkind.Errorf(errkind.Internal, "reading the audit log: %v", err)
	}
	if x != nil {
		// From the index's per-skill summaries: nothing is read from the
		// log but what was appended since the last read.
		if err := x.refresh(); err != nil {
			return nil, errkind.Errorf(errkind.Internal, "reading the audit log: %v", err)
		}
		err = x.history(approver, caller, p.Skill, p.Since, p.Until, func(h histRun) error {
			b, err := bucket(time.Unix(0, h.time).UTC())
			if err != nil {
				return err
			}
			b.Runs++
			b.durations = append(b.durations, h.dur)
			if h.failure != "" {
				b.Failures[h.failure]++
			}
			b.EgressAttempts += h.egA
			b.EgressDenied += h.egD
			return nil
		})
	} else {
		err = audit.Read(dir, func(r *audit.Record) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if !f.Match(r) || !visible(approver, caller, r) || r.Run == nil {
				return nil
			}
			b, err := bucket(r.Time)
			if err != nil {
				return err
			}
			addRun(b, r)
			return nil
		})
	}
	if err != nil {
		if api.KindOf(err) == api.KindInvalidParams {
			return nil, err
		}
		return nil, errkind.Errorf(errkind.Internal, "reading the audit log: %v", err)
	}
	out := &SkillHistory{Skill: p.Skill, Bucket: p.Bucket.String(), OwnOnly: !approver, Buckets: []HistoryBucket{}}
	for _, b := range byStart {
		slices.Sort(b.durations)
		b.P50MS, b.P90MS, b.P99MS = percentile(b.durations, 50), percentile(b.durations, 90), percentile(b.durations, 99)
		out.Buckets = append(out.Buckets, *b)
	}
	sort.Slice(out.Buckets, func(i, j int) bool { return out.Buckets[i].Start.Before(out.Buckets[j].Start) })
	return out, nil
}

// addRun counts one run.end record into b.
func addRun(b *HistoryBucket, r *audit.Record) {
	run := r.Run
	b.Runs++
	b.durations = append(b.durations, run.DurationMS)
	if f := runFailure(r.Outcome, run); f != "" {
		b.Failures[f]++
	}
	if st := run.EgressStats; st != nil {
		b.EgressAttempts += int64(st.Connections + st.Denied)
		b.EgressDenied += int64(st.Denied)
	}
}

// runFailure is the failure a run.end record counts as ("" for none).
func runFailure(outcome string, run *audit.RunInfo) string {
	switch {
	case outcome == audit.OutcomeError || run.ExitCode == nil:
		return audit.OutcomeError
	case run.Reason != "" && run.Reason != "exit":
		return run.Reason
	case *run.ExitCode != 0:
		return "exit"
	}
	return ""
}

// percentile is the nearest-rank percentile of sorted values (0 for none).
func percentile(sorted []int64, pct int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := (pct*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

// ShowConfirmation returns one confirmation in full, under the rule of
// confirmations.list: approvers see every request, others only their own.
func (s *Service) ShowConfirmation(ctx context.Context, caller api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	res, err := s.ListConfirmations(ctx, caller, api.ListConfirmationsParams{})
	if err != nil {
		return nil, err
	}
	for _, c := range res.Confirmations {
		if c.ID == p.ID {
			return c, nil
		}
	}
	return nil, errkind.Errorf(errkind.NotFound, "no confirmation %q that uid %d may see", p.ID, caller.UID)
}
