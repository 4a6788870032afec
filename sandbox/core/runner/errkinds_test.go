package runner

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// TestRunFailureKinds pins the kind a run's failure has when the engine
// returns it: a backend's unavailable or invalid job keeps its kind, one
// of a kind already keeps it, and any other is the sandbox failing.
func TestRunFailureKinds(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		kind       string
		textSuffix string
	}{
		{"runtime unavailable", fmt.Errorf("boot: %w", runtime.ErrUnavailable), api.KindUnavailable, "boot: runtime unavailable"},
		{"invalid job", errkind.Errorf(runtime.ErrInvalidJob, "bad env"), api.KindInvalidParams, "invalid job: bad env"},
		{"classified", errkind.Errorf(api.ErrLimitExceeded, "too many"), api.KindLimitExceeded, "limit exceeded: too many"},
		{"plain", errors.New("runsc: exit 1"), api.KindInternal, "sandbox failed: runsc: exit 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runFailure(tc.err)
			if api.KindOf(got) != tc.kind || !strings.HasSuffix(got.Error(), tc.textSuffix) || !errors.Is(got, tc.err) {
				t.Errorf("runFailure(%v) = %v (%s), want kind %s, text ending %q", tc.err, got, api.KindOf(got), tc.kind, tc.textSuffix)
			}
		})
	}
}
