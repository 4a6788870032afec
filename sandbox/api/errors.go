package api

import (
	"errors"
	"fmt"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// The wire names of the error kinds (runtime/errkind): what went wrong, in
// words a host (or the model behind it) branches on, never on a message's
// text. Over JSON-RPC a kind is data.kind of the error object
// (sandbox/doors/jsonrpc maps each to a code); over MCP it is part of the tool
// error.
const (
	KindNotFound             = "not_found"
	KindInvalidParams        = "invalid_params"
	KindDenied               = "denied"
	KindConfirmationRequired = "confirmation_required"
	KindLimitExceeded        = "limit_exceeded"
	KindUnavailable          = "unavailable"
	KindInternal             = "internal"
)

// The kinds, as the front ends and the client name them: errkind's own
// values, so errors.Is(err, api.ErrDenied) and errors.Is(err,
// errkind.Denied) are one test. The core makes errors of a kind with
// errkind.Errorf and a message that says what to do next; a package's
// sentinel is of a kind by errkind.New; front ends classify with KindOf.
var (
	ErrNotFound             = errkind.NotFound
	ErrInvalidParams        = errkind.InvalidParams
	ErrDenied               = errkind.Denied
	ErrConfirmationRequired = errkind.ConfirmationRequired
	ErrLimitExceeded        = errkind.LimitExceeded
	ErrUnavailable          = errkind.Unavailable
	ErrInternal             = errkind.Internal
)

// KindInfo pairs a kind's wire name with its sentinel.
type KindInfo struct {
	Kind     string
	Sentinel error
}

// Kinds is the one table of error kinds' wire names.
var Kinds = []KindInfo{
	{KindNotFound, ErrNotFound},
	{KindInvalidParams, ErrInvalidParams},
	{KindDenied, ErrDenied},
	{KindConfirmationRequired, ErrConfirmationRequired},
	{KindLimitExceeded, ErrLimitExceeded},
	{KindUnavailable, ErrUnavailable},
	{KindInternal, ErrInternal},
}

// KindOf returns the wire name of err's kind (errkind.Of): that of the
// outermost kind in its tree; unavailable for a call cancelled or timed
// out; internal for anything else. nil has no kind ("").
func KindOf(err error) string {
	kind := errkind.Of(err)
	if kind == nil {
		return ""
	}
	for _, k := range Kinds {
		if k.Sentinel == kind {
			return k.Kind
		}
	}
	return KindInternal
}

// Sentinel returns the sentinel of kind (ErrInternal for an unknown kind),
// e.g. so a client-side error can match errors.Is(err, api.ErrDenied).
func Sentinel(kind string) error {
	for _, k := range Kinds {
		if k.Kind == kind {
			return k.Sentinel
		}
	}
	return ErrInternal
}

// dataError attaches extra error-data fields to an error.
type dataError struct {
	err  error
	data map[string]any
}

func (e *dataError) Error() string { return e.err.Error() }
func (e *dataError) Unwrap() error { return e.err }

// WithData returns err with extra fields a host can act on (limit, methods,
// ...); errors.Is/As still see through it. When several layers add data,
// the outermost value for a key wins; "kind" is reserved and ignored.
func WithData(err error, data map[string]any) error {
	if err == nil {
		return nil
	}
	return &dataError{err: err, data: data}
}

// ErrorData merges the data of every WithData wrapper, and of every error
// with an ErrorData() map[string]any method (ConfirmationRequiredError), in
// err's tree (outermost wins). It returns nil when there is none.
func ErrorData(err error) map[string]any {
	into := map[string]any{}
	collectData(err, into)
	if len(into) == 0 {
		return nil
	}
	return into
}

func collectData(err error, into map[string]any) {
	if err == nil {
		return
	}
	var data map[string]any
	switch e := err.(type) {
	case *dataError:
		data = e.data
	case interface{ ErrorData() map[string]any }:
		data = e.ErrorData()
	}
	for k, v := range data {
		if _, set := into[k]; !set && k != "kind" {
			into[k] = v
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		collectData(u.Unwrap(), into)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			collectData(e, into)
		}
	}
}

// ErrConfirmationPending matches the ConfirmationRequiredError of a call
// that passed the id of a confirmation nobody has decided yet.
var ErrConfirmationPending = errors.New("confirmation pending")

// ConfirmationRequiredError is the error of a run that needs approval
// (kind confirmation_required). Its data (ConfirmationRequiredData) is what
// the host shows an approver and passes back.
type ConfirmationRequiredError struct {
	ID, Reason, Rule, Digest string
	// Pending marks the answer to a call that passed the id of a request
	// nobody has decided yet.
	Pending bool
}

func (e *ConfirmationRequiredError) Error() string {
	if e.Pending {
		return fmt.Sprintf("confirmation %s is still waiting for an approver (confirmations.approve); repeat this call with confirmation_id %q once it is approved", e.ID, e.ID)
	}
	return fmt.Sprintf("this run needs approval (%s; rule %s): ask an approver to approve confirmation %s (confirmations.approve), then repeat the same call with confirmation_id %q", e.Reason, e.Rule, e.ID, e.ID)
}

// Unwrap makes the error match ErrConfirmationRequired.
func (e *ConfirmationRequiredError) Unwrap() error { return ErrConfirmationRequired }

// Is makes a pending answer match ErrConfirmationPending.
func (e *ConfirmationRequiredError) Is(target error) bool {
	return e.Pending && target == ErrConfirmationPending
}

// Data is the error's data as a struct.
func (e *ConfirmationRequiredError) Data() ConfirmationRequiredData {
	return ConfirmationRequiredData{ConfirmationID: e.ID, Reason: e.Reason, Rule: e.Rule, Digest: e.Digest}
}

// ErrorData is the error's data for a response.
func (e *ConfirmationRequiredError) ErrorData() map[string]any {
	return map[string]any{"confirmation_id": e.ID, "reason": e.Reason, "rule": e.Rule, "digest": e.Digest}
}

// auditedError marks an error whose refusal the service has already written
// to the audit log in detail (a refused read, a policy deny, a confirmation
// refusal, a run's end), so a front end that audits refused calls does not
// add a second record for the same call. It changes nothing else.
type auditedError struct{ err error }

func (e *auditedError) Error() string { return e.err.Error() }
func (e *auditedError) Unwrap() error { return e.err }

// MarkAudited returns err marked as audited (nil stays nil).
func MarkAudited(err error) error {
	if err == nil {
		return nil
	}
	return &auditedError{err: err}
}

// IsAudited reports whether err carries MarkAudited's mark.
func IsAudited(err error) bool {
	var a *auditedError
	return errors.As(err, &a)
}
