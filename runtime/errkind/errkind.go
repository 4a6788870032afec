// Package errkind gives an error its kind as data: a sentinel (api.ErrDenied,
// runtime.ErrInvalidJob, audit.ErrUnavailable, ...) held beside the message
// rather than spliced into its text. errors.Is sees the kind, the message
// reads as it always did ("denied: the user declined the run"), and a front
// end that prints for a person takes Detail (the message without the kind
// words) instead of cutting known prefixes off strings.
//
// It sits below every other package of skillbox and imports none of them,
// so the runtime, the policy, the service and the front ends share one type.
package errkind

import (
	"errors"
	"fmt"
)

// Error is an error of a kind. Its text is the kind's words, ": ", and the
// message; it wraps both the kind and the message's own wrapped errors.
type Error struct {
	// Kind is a sentinel error: what went wrong, for errors.Is.
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
// starts with: the message of the outermost Error when that Error is of
// one of kinds and nothing outside it adds text (a wrapper that only
// carries data or marks), repeated while the message is itself such an
// Error. Any other error is returned whole: one with text before its kind
// ("load skill x: not found: ..."), one of a kind not listed (whose words
// are part of what it says, "invalid config: ..."), one without a kind.
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

func listed(kind error, kinds []error) bool {
	for _, k := range kinds {
		if errors.Is(kind, k) {
			return true
		}
	}
	return false
}
