package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
)

// Error kinds: the value of data.kind on every error response. A host (or the
// model behind it) branches on the kind, never on the message text.
const (
	KindNotFound             = "not_found"
	KindInvalidParams        = "invalid_params"
	KindDenied               = "denied"
	KindConfirmationRequired = "confirmation_required"
	KindLimitExceeded        = "limit_exceeded"
	KindUnavailable          = "unavailable"
	KindInternal             = "internal"
)

// JSON-RPC error codes. The first five are the standard ones; domain errors
// use the implementation-defined range -32000..-32099, one code per kind, so a
// plain JSON-RPC client that ignores data.kind can still tell them apart.
const (
	CodeParseError           = -32700
	CodeInvalidRequest       = -32600
	CodeMethodNotFound       = -32601
	CodeInvalidParams        = -32602
	CodeInternal             = -32603
	CodeNotFound             = -32001
	CodeDenied               = -32002
	CodeConfirmationRequired = -32003
	CodeLimitExceeded        = -32004
	CodeUnavailable          = -32005
)

// Sentinels for the error kinds. Handlers (and the stores in this package)
// wrap them with %w and a message that says what to do next; ToRPCError turns
// the wrapped error into a response with the matching kind and code.
var (
	ErrNotFound             = errors.New("not found")
	ErrInvalidParams        = errors.New("invalid params")
	ErrDenied               = errors.New("denied")
	ErrConfirmationRequired = errors.New("confirmation required")
	ErrLimitExceeded        = errors.New("limit exceeded")
	ErrUnavailable          = errors.New("unavailable")
)

// Error is a JSON-RPC error object. On the wire it is
//
//	{"code": -32001, "message": "...", "data": {"kind": "not_found", ...Data}}
//
// Kind is always present in data; Data holds extra fields a host can act on
// (confirmation_id, limit, methods, ...). A handler may return an *Error
// directly when it needs full control of the code or data.
type Error struct {
	Code    int
	Message string
	Kind    string
	Data    map[string]any
}

func (e *Error) Error() string { return e.Kind + ": " + e.Message }

// MarshalJSON writes the JSON-RPC error object with kind folded into data.
func (e *Error) MarshalJSON() ([]byte, error) {
	data := make(map[string]any, len(e.Data)+1)
	for k, v := range e.Data {
		data[k] = v
	}
	kind := e.Kind
	if kind == "" {
		kind = KindInternal
	}
	data["kind"] = kind
	return json.Marshal(struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	}{e.Code, e.Message, data})
}

// kindCodes maps each kind to its JSON-RPC code.
var kindCodes = map[string]int{
	KindNotFound:             CodeNotFound,
	KindInvalidParams:        CodeInvalidParams,
	KindDenied:               CodeDenied,
	KindConfirmationRequired: CodeConfirmationRequired,
	KindLimitExceeded:        CodeLimitExceeded,
	KindUnavailable:          CodeUnavailable,
	KindInternal:             CodeInternal,
}

// CodeForKind returns the JSON-RPC code used for kind (internal for an
// unknown kind).
func CodeForKind(kind string) int {
	if c, ok := kindCodes[kind]; ok {
		return c
	}
	return CodeInternal
}

type kindMapping struct {
	sentinel error
	kind     string
}

var (
	kindsMu sync.RWMutex
	// kinds is checked in order; the first sentinel the error matches wins.
	// The package's own sentinels come first, so an error that wraps both
	// sandbox.ErrDenied and something registered later is "denied".
	kinds = []kindMapping{
		{ErrNotFound, KindNotFound},
		{ErrInvalidParams, KindInvalidParams},
		{ErrDenied, KindDenied},
		{ErrConfirmationRequired, KindConfirmationRequired},
		{ErrLimitExceeded, KindLimitExceeded},
		{ErrUnavailable, KindUnavailable},
		// A call cancelled by Shutdown (or a client that went away) is the
		// daemon being unavailable, not a bug in it.
		{context.Canceled, KindUnavailable},
		{context.DeadlineExceeded, KindUnavailable},
	}
)

// RegisterErrorKind makes errors that match sentinel (errors.Is) map to kind,
// so other packages' sentinels (skills.ErrNotFound, policy.ErrDenied, ...)
// classify without this package importing them. Call it at start-up, before
// serving. It panics on an unknown kind: that is a programming error.
func RegisterErrorKind(sentinel error, kind string) {
	if _, ok := kindCodes[kind]; !ok {
		panic("sandbox: RegisterErrorKind: unknown kind " + kind)
	}
	kindsMu.Lock()
	defer kindsMu.Unlock()
	kinds = append(kinds, kindMapping{sentinel, kind})
}

// ErrorKind returns the kind err maps to (KindInternal when no registered
// sentinel matches).
func ErrorKind(err error) string {
	var re *Error
	if errors.As(err, &re) {
		if re.Kind != "" {
			return re.Kind
		}
		return KindInternal
	}
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	for _, m := range kinds {
		if errors.Is(err, m.sentinel) {
			return m.kind
		}
	}
	return KindInternal
}

// dataError attaches extra error-data fields to an error.
type dataError struct {
	err  error
	data map[string]any
}

func (e *dataError) Error() string { return e.err.Error() }
func (e *dataError) Unwrap() error { return e.err }

// WithData returns err with extra fields for the response's data object, e.g.
//
//	return sandbox.WithData(fmt.Errorf("run needs approval (rule %s): %w", rule, sandbox.ErrConfirmationRequired),
//		map[string]any{"confirmation_id": c.ID, "reason": c.Reason, "rule": c.Rule, "digest": c.Digest})
//
// errors.Is/As still see through it. When several layers add data, the
// outermost value for a key wins; "kind" is reserved and ignored.
func WithData(err error, data map[string]any) error {
	if err == nil {
		return nil
	}
	return &dataError{err: err, data: data}
}

// collectData merges the data of every WithData wrapper, and of every error
// with an ErrorData() map[string]any method (e.g. ConfirmationRequiredError),
// in err's tree (outermost wins).
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
	if data != nil {
		for k, v := range data {
			if _, set := into[k]; !set && k != "kind" {
				into[k] = v
			}
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

// ToRPCError converts a handler's error into the error object sent to the
// client. An *Error anywhere in the chain is used as is (its Kind defaulted
// to internal, its Code defaulted from the kind). Otherwise the kind comes
// from the registered sentinels, the code from the kind, the message is
// err.Error() (handlers write messages a model can act on; do not put secrets
// in them), and data collects WithData fields. Unclassified errors are
// "internal". nil maps to nil.
func ToRPCError(err error) *Error {
	if err == nil {
		return nil
	}
	var re *Error
	if errors.As(err, &re) {
		out := *re
		if out.Kind == "" {
			out.Kind = KindInternal
		}
		if out.Code == 0 {
			out.Code = CodeForKind(out.Kind)
		}
		return &out
	}
	kind := ErrorKind(err)
	data := map[string]any{}
	collectData(err, data)
	if len(data) == 0 {
		data = nil
	}
	return &Error{Code: CodeForKind(kind), Message: err.Error(), Kind: kind, Data: data}
}

// auditedError marks an error whose refusal a handler has already written
// to the audit log in detail (a refused read, a policy deny, a confirmation
// refusal, a run's end), so the daemon does not add a call.refused record
// for the same call. It changes nothing else: kind, code, message and data
// come from the error it wraps.
type auditedError struct{ err error }

func (e *auditedError) Error() string { return e.err.Error() }
func (e *auditedError) Unwrap() error { return e.err }

// markAudited returns err marked as audited (nil stays nil).
func markAudited(err error) error {
	if err == nil {
		return nil
	}
	return &auditedError{err: err}
}

// wasAudited reports whether err carries the mark of markAudited.
func wasAudited(err error) bool {
	var a *auditedError
	return errors.As(err, &a)
}
