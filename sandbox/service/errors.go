package service

import (
	"errors"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/skills"
)

// foreignKinds gives the errors of the packages below the service their
// kind, so nothing they return leaves the service unclassified.
var foreignKinds = []struct{ err, kind error }{
	{skills.ErrNotFound, api.ErrNotFound},
	{skills.ErrBadName, api.ErrInvalidParams},
	{skills.ErrConflict, api.ErrDenied},
	{skills.ErrEscape, api.ErrInvalidParams},
	{skills.ErrNotRegular, api.ErrInvalidParams},
	{skills.ErrTooLarge, api.ErrInvalidParams},
	{policy.ErrDenied, api.ErrDenied},
	{runtime.ErrUnavailable, api.ErrUnavailable},
	{runtime.ErrInvalidJob, api.ErrInvalidParams},
	{audit.ErrUnavailable, api.ErrUnavailable},
}

// kindError adds a kind sentinel to an error without changing its text.
type kindError struct{ err, kind error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.err, e.kind} }

// classify makes sure err carries an api kind: one of its own, or that of
// a sentinel of the packages below.
func classify(err error) error {
	if err == nil || api.KindOf(err) != api.KindInternal || errors.Is(err, api.ErrInternal) {
		return err
	}
	for _, f := range foreignKinds {
		if errors.Is(err, f.err) {
			return &kindError{err: err, kind: f.kind}
		}
	}
	return err
}
