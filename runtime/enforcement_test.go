package runtime_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

func TestEnforcement(t *testing.T) {
	by := runtime.Enforcement(map[string]string{"memory": runtime.EnforcedBySkillboxPoll, "pids": runtime.EnforcedByRlimit})
	if len(by) != len(runtime.LimitFields) {
		t.Errorf("Enforcement names %d limits, LimitFields has %d", len(by), len(runtime.LimitFields))
	}
	for _, tc := range []struct{ limit, want string }{
		{"memory", runtime.EnforcedBySkillboxPoll},
		{"pids", runtime.EnforcedByRlimit},
		{"cpus", runtime.EnforcedByNone}, // a sandbox limit the backend left out
		{"workdir", runtime.EnforcedByNone},
		{"timeout", runtime.EnforcedBySkillbox},
		{"stdout", runtime.EnforcedBySkillbox},
		{"egress_connections", runtime.EnforcedBySkillbox},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			if by[tc.limit] != tc.want {
				t.Errorf("%s enforced by %q, want %q", tc.limit, by[tc.limit], tc.want)
			}
		})
	}
	if got := runtime.Unenforced(by); !slices.Equal(got, []string{"cpus", "workdir", "tmp"}) {
		t.Errorf("Unenforced = %v", got)
	}
	if got := runtime.Unenforced(nil); got != nil {
		t.Errorf("Unenforced(nil) = %v", got)
	}
}

func TestRefuseRootless(t *testing.T) {
	err := runtime.RefuseRootless("runc")
	if !errors.Is(err, runtime.ErrUnavailable) {
		t.Errorf("want ErrUnavailable: %v", err)
	}
}
