package service

import (
	"errors"
	"fmt"
	"testing"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/skills"
)

// TestSentinelKinds pins the kind each sentinel of the packages below the
// service has, wrapped or bare: it carries it, so the service returns it
// as it is.
func TestSentinelKinds(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind string
	}{
		{skills.ErrNotFound, api.KindNotFound},
		{skills.ErrBadName, api.KindInvalidParams},
		{skills.ErrConflict, api.KindDenied},
		{skills.ErrEscape, api.KindInvalidParams},
		{skills.ErrNotRegular, api.KindInvalidParams},
		{skills.ErrTooLarge, api.KindInvalidParams},
		{policy.ErrDenied, api.KindDenied},
		{runtime.ErrUnavailable, api.KindUnavailable},
		{runtime.ErrInvalidJob, api.KindInvalidParams},
		{audit.ErrUnavailable, api.KindUnavailable},
		{audit.ErrClosed, api.KindUnavailable},
		{errors.New("plain"), api.KindInternal},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			for _, err := range []error{tc.err, fmt.Errorf("context: %w", tc.err)} {
				if got := api.KindOf(err); got != tc.kind {
					t.Errorf("KindOf(%v) = %s, want %s", err, got, tc.kind)
				}
			}
		})
	}
}
