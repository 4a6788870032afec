package audit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/span"
	"github.com/skillbox/skillbox/sandbox/api"
)

// Auditor is the audit log as skillbox writes it (audit.Log; a fake in
// tests).
type Auditor interface {
	Append(ctx context.Context, r *Record) error
	Healthy() error
}

// Recorder is the one way records reach the audit log: the service's
// calls and the engine's runs both write through it, and both ask it
// whether the log can be written before they act (fail closed). Journal is
// the implementation; the stack makes one per audit log and hands it to
// both.
type Recorder interface {
	// Record appends r. Its error is the refusal the caller returns.
	Record(ctx context.Context, r *Record) error
	// Check is nil when the log can be written, else the refusal.
	Check() error
	// Enabled says whether there is an audit log at all.
	Enabled() bool
	// FreeBytes is the room left on the log's filesystem; ok is false when
	// the log cannot tell (or there is none).
	FreeBytes() (free int64, ok bool, err error)
}

// AppendObserver sees every record the journal appends, once the append
// has ended: how long it took and its error. It is how the daemon's
// metrics (sandbox/frame/metrics) count runs, builds and egress from the same
// records the audit holds, and time the appends. It must not block or
// change r.
type AppendObserver interface {
	Appended(r *Record, took time.Duration, err error)
}

// Journal is the Recorder over an Auditor; a nil Auditor (a local run
// without an audit dir) records nothing and is always healthy.
type Journal struct {
	log      Auditor
	logger   hclog.Logger
	observer AppendObserver
}

var _ Recorder = (*Journal)(nil)

// NewJournal makes the one writer of log; logger gets append failures.
func NewJournal(log Auditor, logger hclog.Logger) *Journal {
	if l, ok := log.(*Log); ok && l == nil {
		log = nil // a typed nil means "no audit", not a panic
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Journal{log: log, logger: logger}
}

// Observe makes o see every append from now on (nil: none). The stack
// sets it before the journal is used.
func (j *Journal) Observe(o AppendObserver) { j.observer = o }

// Record implements Recorder: a failure is logged, and returned as the
// refusal of the call that needed the record.
func (j *Journal) Record(ctx context.Context, r *Record) error {
	if j == nil || j.log == nil {
		return nil
	}
	if r.TraceID == "" {
		r.TraceID = span.TraceID(ctx)
	}
	ctx, sp := span.Start(ctx, "audit.append", span.AttrEvent.String(r.Event))
	err := j.append(ctx, r)
	span.End(sp, err, api.KindOf(err))
	if err != nil {
		j.logger.Error("audit append failed", "event", r.Event, "outcome", r.Outcome, "error", err)
		return auditDown(err)
	}
	return nil
}

// append appends r, telling the observer.
func (j *Journal) append(ctx context.Context, r *Record) error {
	if j.observer == nil {
		return j.log.Append(ctx, r)
	}
	start := time.Now()
	err := j.log.Append(ctx, r)
	j.observer.Appended(r, time.Since(start), err)
	return err
}

// Check implements Recorder.
func (j *Journal) Check() error {
	if j == nil || j.log == nil {
		return nil
	}
	if err := j.log.Healthy(); err != nil {
		return auditDown(err)
	}
	return nil
}

// Enabled implements Recorder.
func (j *Journal) Enabled() bool { return j != nil && j.log != nil }

// freeSpacer is an audit log that can say how much room it has left.
type freeSpacer interface {
	FreeBytes() (int64, error)
}

// FreeBytes implements Recorder.
func (j *Journal) FreeBytes() (int64, bool, error) {
	if j == nil || j.log == nil {
		return 0, false, nil
	}
	fs, ok := j.log.(freeSpacer)
	if !ok {
		return 0, false, nil
	}
	free, err := fs.FreeBytes()
	return free, true, err
}

// auditDown is the error of a call refused because the audit log cannot be
// written (fail closed). It says so once, with the log's own reason.
func auditDown(err error) error {
	why := errkind.Detail(err, ErrUnavailable)
	return errkind.Errorf(errkind.Unavailable, "the audit log cannot be written (%s); skillbox refuses audited calls, runs included, until it can", why)
}

// ClipText cuts s to at most n bytes of valid UTF-8, saying how long it was.
func ClipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + fmt.Sprintf("… (%d bytes)", len(s))
}
