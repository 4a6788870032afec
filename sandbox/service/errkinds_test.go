package service

import (
	"errors"
	"fmt"
	"testing"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/skills"
)

// TestSentinelKinds pins the kind each sentinel of the packages below the
// service has when the service returns it, wrapped or bare.
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
				if got := api.KindOf(returned(err)); got != tc.kind {
					t.Errorf("KindOf(%v) = %s, want %s", err, got, tc.kind)
				}
				if got := returned(err).Error(); got != err.Error() {
					t.Errorf("the service changed the text: %q, want %q", got, err.Error())
				}
			}
		})
	}
}

// returned is err as the service returns it: as it is, since every
// sentinel carries its kind.
func returned(err error) error { return err }
