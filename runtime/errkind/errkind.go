// Package errkind is the error vocabulary of skillbox, the way containerd's
// errdefs is: a handful of kinds (NotFound, Denied, Unavailable, ...) that a
// caller branches on with errors.Is or Of, never on a message's text.
//
// A package's sentinel is of a kind by construction (New): it keeps its own
// words and errors.Is matches both it and its kind, so no table translates
// one package's errors into another's. An error made with Errorf or Wrap
// holds its kind beside the message rather than spliced into its text: the
// message reads as it always did ("denied: the user declined the run"), and
// a front end that prints for a person takes Detail (the message without
// the kind words) instead of cutting known prefixes off strings.
//
// It sits below every other package of skillbox and imports none of them.
// The wire names of the kinds and their JSON-RPC codes are the wire
// contract's (sandbox/api, sandbox/doors/jsonrpc).
package errkind

import (
	"context"
	"errors"
	"fmt"
)

// The kinds: what went wrong, in words a host (or the model behind it)
// branches on.
var (
	NotFound             = errors.New("not found")
	InvalidParams        = errors.New("invalid params")
	Denied               = errors.New("denied")
	ConfirmationRequired = errors.New("confirmation required")
	LimitExceeded        = errors.New("limit exceeded")
	Unavailable          = errors.New("unavailable")
	Internal             = errors.New("internal error")
)

// kinds lists every kind, for Of.
var kinds = []error{NotFound, InvalidParams, Denied, ConfirmationRequired, LimitExceeded, Unavailable, Internal}

// sentinel is a package's sentinel error of a kind.
type sentinel struct {
	kind error
	text string
}

// New returns a sentinel error of kind whose text is text: errors.Is
// matches it, and its kind, in any error that wraps it.
func New(kind error, text string) error { return &sentinel{kind: kind, text: text} }

func (s *sentinel) Error() string { return s.text }

// Is makes the sentinel match its kind.
func (s *sentinel) Is(target error) bool { return target == s.kind }

// Of returns the kind of err: the outermost kind in its tree (walked as
// errors.Is walks it, so an error of one kind whose cause has another takes
// the kind it was given last); a call cancelled (the caller went away,
// skillbox shuts down) or timed out is Unavailable; anything else is
// Internal. nil has no kind (nil).
func Of(err error) error {
	if err == nil {
		return nil
	}
	if kind := outermost(err); kind != nil {
		return kind
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Unavailable
	}
	return Internal
}

func outermost(err error) error {
	for _, k := range kinds {
		if err == k {
			return k
		}
	}
	if is, ok := err.(interface{ Is(error) bool }); ok {
		for _, k := range kinds {
			if is.Is(k) {
				return k
			}
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return outermost(inner)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if kind := outermost(e); kind != nil {
				return kind
			}
		}
	}
	return nil
}

// Error is an error of a kind. Its text is the kind's words, ": ", and the
// message; it wraps both the kind and the message's own wrapped errors.
type Error struct {
	// Kind is a kind or a sentinel: what went wrong, for errors.Is.
	Kind error
	// Err is the message: what happened and what to do next, with any
	// cause wrapped last.
	Err error
}

// Errorf returns an error of kind whose message is fmt.Errorf(format,
// args...): context first, a wrapped cause (%w) last.
func Errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// Wrap returns err as an error of kind (nil stays nil). The message is
// err's text.
func Wrap(kind, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: kind, Err: err}
}

func (e *Error) Error() string { return e.Kind.Error() + ": " + e.Err.Error() }

// Unwrap lets errors.Is and errors.As see the kind and the message's causes.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

// Detail returns err's text without the words of the listed kinds it
// starts with: the message of the outermost Error when that Error's Kind is
// one of kinds (or wraps one) and nothing outside it adds text (a wrapper
// that only carries data or marks), repeated while the message is itself
// such an Error. Any other error is returned whole: one with text before
// its kind ("load skill x: not found: ..."), one of a kind not listed
// (whose words are part of what it says, "invalid config: ..."), one
// without a kind. A sentinel made by New speaks its own words: they go
// only when the sentinel itself is listed, not when its kind is.
func Detail(err error, kinds ...error) string {
	if err == nil {
		return ""
	}
	text := err.Error()
	for {
		var k *Error
		if !errors.As(err, &k) || k.Error() != text || !listed(k.Kind, kinds) {
			return text
		}
		err, text = k.Err, k.Err.Error()
	}
}

// listed reports whether kind is one of kinds or wraps one (Unwrap, not a
// sentinel's Is).
func listed(kind error, kinds []error) bool {
	for kind != nil {
		for _, k := range kinds {
			if kind == k {
				return true
			}
		}
		switch u := kind.(type) {
		case interface{ Unwrap() error }:
			kind = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if listed(e, kinds) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}
