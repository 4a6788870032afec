package errkind_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/skillbox/skillbox/runtime/errkind"
)

var (
	errDenied  = errors.New("denied")
	errInvalid = errors.New("invalid job")
)

// marked wraps an error without adding text, as api.WithData does.
type marked struct{ err error }

func (m *marked) Error() string { return m.err.Error() }
func (m *marked) Unwrap() error { return m.err }

func TestErrorf(t *testing.T) {
	err := errkind.Errorf(errDenied, "read %s: %w", "x", fs.ErrNotExist)
	if got, want := err.Error(), "denied: read x: file does not exist"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, errDenied) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is misses the kind or the cause: %v", err)
	}
	var k *errkind.Error
	if !errors.As(fmt.Errorf("outer: %w", err), &k) || k.Kind != errDenied {
		t.Errorf("errors.As did not find the kind")
	}
	if errkind.Wrap(errDenied, nil) != nil {
		t.Errorf("Wrap(kind, nil) != nil")
	}
}

func TestDetail(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"kind not listed", errkind.Errorf(errors.New("invalid config"), "line 3"), "invalid config: line 3"},
		{"no kind", errors.New("plain"), "plain"},
		{"one kind", errkind.Errorf(errDenied, "the user declined"), "the user declined"},
		{"kind in kind", errkind.Wrap(errDenied, errkind.Errorf(errInvalid, "bad env")), "bad env"},
		{"through a mark", &marked{errkind.Errorf(errDenied, "no")}, "no"},
		{"text before the kind", fmt.Errorf("load x: %w", errkind.Errorf(errDenied, "no")), "load x: denied: no"},
		{"kind words inside the message", errkind.Errorf(errDenied, "%w", fmt.Errorf("step: %w", errkind.Errorf(errInvalid, "bad"))), "step: invalid job: bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errkind.Detail(tc.err, errDenied, errInvalid); got != tc.want {
				t.Errorf("Detail = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewAndOf(t *testing.T) {
	errNoSkill := errkind.New(errkind.NotFound, "no such skill")
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"nil", nil, nil},
		{"sentinel", errNoSkill, errkind.NotFound},
		{"wrapped sentinel", fmt.Errorf("load x: %w", errNoSkill), errkind.NotFound},
		{"kind over a sentinel's", errkind.Errorf(errkind.Unavailable, "store: %w", errNoSkill), errkind.Unavailable},
		{"sentinel as an Error's kind", errkind.Errorf(errNoSkill, "%q", "x"), errkind.NotFound},
		{"cancelled", fmt.Errorf("call: %w", context.Canceled), errkind.Unavailable},
		{"kind over cancelled", errkind.Wrap(errkind.Denied, context.Canceled), errkind.Denied},
		{"none", errors.New("plain"), errkind.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errkind.Of(tc.err); got != tc.want {
				t.Errorf("Of(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	if errNoSkill.Error() != "no such skill" || !errors.Is(fmt.Errorf("x: %w", errNoSkill), errkind.NotFound) || errors.Is(errNoSkill, errkind.Denied) {
		t.Errorf("New: text %q, or errors.Is misses its kind or matches another", errNoSkill)
	}
	// A sentinel's words are its own: they stay when only its kind is listed.
	err := errkind.Errorf(errNoSkill, "%q", "x")
	if got := errkind.Detail(err, errkind.NotFound); got != `no such skill: "x"` {
		t.Errorf("Detail(kind listed) = %q", got)
	}
	if got := errkind.Detail(err, errNoSkill); got != `"x"` {
		t.Errorf("Detail(sentinel listed) = %q", got)
	}
}
