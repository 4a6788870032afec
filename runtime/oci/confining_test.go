package oci

import (
	"errors"
	"slices"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// TestSpecConfiningSupervisor: the opt-in gives a session sandbox's first
// process uid 0 with exactly ConfiningCapabilities (never CAP_SYS_ADMIN)
// and keeps no_new_privileges; without it the spec is the default one;
// it is refused where it cannot work.
func TestSpecConfiningSupervisor(t *testing.T) {
	session := func() runtime.Job {
		j := goldenJob()
		j.Sandbox.SkillDir = ""
		j.Sandbox.Session = &runtime.SessionMounts{SkillsDir: "/run/skillbox/session-sandboxes/s", Supervisor: "/usr/bin/skillbox"}
		j.Invocation.Args = []string{runtime.SupervisorPath, "supervise", "--job-uid", "65534", "--job-netns"}
		return j
	}
	t.Run("on", func(t *testing.T) {
		s := mustSpec(t, session(), SpecOptions{ConfiningSupervisor: true})
		if u := s.Process.User; u.UID != 0 || u.GID != 0 || len(u.AdditionalGids) != 0 || !s.Process.NoNewPrivileges {
			t.Errorf("user %+v no_new_privileges %v", s.Process.User, s.Process.NoNewPrivileges)
		}
		c := s.Process.Capabilities
		for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted} {
			if !slices.Equal(set, ConfiningCapabilities) {
				t.Errorf("%s %v, want %v", name, set, ConfiningCapabilities)
			}
		}
		if len(c.Inheritable) != 0 || len(c.Ambient) != 0 || slices.Contains(c.Bounding, "CAP_SYS_ADMIN") {
			t.Errorf("capabilities %+v", c)
		}
	})
	t.Run("off", func(t *testing.T) {
		s := mustSpec(t, session(), SpecOptions{})
		c := s.Process.Capabilities
		if s.Process.User.UID != runtime.ContainerUID || len(c.Bounding)+len(c.Effective)+len(c.Permitted) != 0 {
			t.Errorf("user %+v capabilities %+v", s.Process.User, c)
		}
	})
	for name, tc := range map[string]struct {
		job  runtime.Job
		opts SpecOptions
	}{
		"not a session": {goldenJob(), SpecOptions{ConfiningSupervisor: true}},
		"rootless":      {session(), SpecOptions{ConfiningSupervisor: true, Rootless: true}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.opts.WorkdirSource, tc.opts.HostsSource = "/run/skillbox/runs/x/work", "/run/skillbox/runs/x/hosts"
			if _, err := BuildSpec(tc.job, tc.opts); !errors.Is(err, runtime.ErrInvalidJob) {
				t.Errorf("err %v, want ErrInvalidJob", err)
			}
		})
	}
}
