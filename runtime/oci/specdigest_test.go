package oci

import (
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// digestSpec is a session sandbox's spec as far as SpecDigest cares.
func digestSpec() *specs.Spec {
	limit, shares := int64(512<<20), uint64(1024)
	return &specs.Spec{
		Version:  specs.Version,
		Hostname: "skillbox",
		Root:     &specs.Root{Path: "/var/lib/skillbox/images/python/rootfs", Readonly: true},
		Process: &specs.Process{
			Args: []string{"/skills/.bin/skillbox", "supervise"},
			Env:  []string{"PATH=/usr/bin:/bin", "HOME=/work"},
			Cwd:  "/work",
			User: specs.User{UID: 65534, GID: 65534},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "size=64m"}},
			{Destination: "/work", Type: "bind", Source: "/run/skillbox/runs/skillbox-s1/work", Options: []string{"rbind", "rw", "nosuid", "nodev"}},
			{Destination: "/skills", Type: "bind", Source: "/var/lib/skillbox/sessions/skillbox-s1", Options: []string{"rbind", "ro", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: "/skillbox/skillbox-s1",
			Resources:   &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}, CPU: &specs.LinuxCPU{Shares: &shares}},
			Namespaces:  []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}},
		},
	}
}

func mustDigest(t *testing.T, s *specs.Spec, extra ...string) string {
	t.Helper()
	d, err := SpecDigest(s, extra...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
		t.Fatalf("digest %q is not sha256:<64 hex>", d)
	}
	return d
}

func TestSpecDigest(t *testing.T) {
	base := mustDigest(t, digestSpec(), "supervisor=sha256:aa")
	for _, tc := range []struct {
		name  string
		edit  func(s *specs.Spec)
		extra []string
		same  bool
	}{
		// What a restore may have differently.
		{"bind mount sources", func(s *specs.Spec) {
			s.Mounts[2].Source = "/run/skillbox/runs/skillbox-s2/work"
			s.Mounts[3].Source = "/elsewhere/sessions/skillbox-s2"
		}, nil, true},
		{"root path", func(s *specs.Spec) { s.Root.Path = "/var/tmp/other/rootfs" }, nil, true},
		{"cgroup path", func(s *specs.Spec) { s.Linux.CgroupsPath = "/other/skillbox-s2" }, nil, true},
		{"resources", func(s *specs.Spec) {
			limit := int64(1 << 30)
			s.Linux.Resources.Memory.Limit = &limit
			pids := int64(64)
			s.Linux.Resources.Pids = &specs.LinuxPids{Limit: &pids}
		}, nil, true},
		{"no resources", func(s *specs.Spec) { s.Linux.Resources = nil }, nil, true},
		{"nothing", func(s *specs.Spec) {}, nil, true},

		// What the sandbox is.
		{"args", func(s *specs.Spec) { s.Process.Args = append(s.Process.Args, "--debug") }, nil, false},
		{"env", func(s *specs.Spec) { s.Process.Env[1] = "HOME=/tmp" }, nil, false},
		{"env order", func(s *specs.Spec) { s.Process.Env[0], s.Process.Env[1] = s.Process.Env[1], s.Process.Env[0] }, nil, false},
		{"user", func(s *specs.Spec) { s.Process.User.UID = 0 }, nil, false},
		{"mount destination", func(s *specs.Spec) { s.Mounts[3].Destination = "/skills2" }, nil, false},
		{"mount options", func(s *specs.Spec) { s.Mounts[2].Options[1] = "ro" }, nil, false},
		{"mount added", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/opt", Type: "bind", Source: "/x", Options: []string{"rbind", "ro"}})
		}, nil, false},
		{"tmpfs size", func(s *specs.Spec) { s.Mounts[1].Options[1] = "size=128m" }, nil, false},
		{"readonly root", func(s *specs.Spec) { s.Root.Readonly = false }, nil, false},
		{"namespaces", func(s *specs.Spec) { s.Linux.Namespaces = s.Linux.Namespaces[:1] }, nil, false},
		{"hostname", func(s *specs.Spec) { s.Hostname = "other" }, nil, false},
		{"extra differs", func(s *specs.Spec) {}, []string{"supervisor=sha256:bb"}, false},
		{"extra missing", func(s *specs.Spec) {}, []string{}, false},
		{"extra added", func(s *specs.Spec) {}, []string{"supervisor=sha256:aa", ""}, false},
		// The separator keeps "a","b" from meaning "ab".
		{"extra split", func(s *specs.Spec) {}, []string{"supervisor=", "sha256:aa"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := digestSpec()
			tc.edit(s)
			extra := tc.extra
			if extra == nil {
				extra = []string{"supervisor=sha256:aa"}
			}
			got := mustDigest(t, s, extra...)
			if (got == base) != tc.same {
				t.Errorf("digest same as the base: %v, want %v", got == base, tc.same)
			}
		})
	}
}

// TestSpecDigestStable: the same spec gives the same digest every time,
// and SpecDigest leaves the spec it is given as it was.
func TestSpecDigestStable(t *testing.T) {
	s := digestSpec()
	first := mustDigest(t, s, "x")
	for range 5 {
		if d := mustDigest(t, s, "x"); d != first {
			t.Fatalf("digest moved: %s, then %s", first, d)
		}
	}
	if !reflect.DeepEqual(s, digestSpec()) {
		t.Error("SpecDigest changed the spec it was given")
	}
	if d := mustDigest(t, digestSpec(), "x"); d != first {
		t.Errorf("an equal spec gives %s, want %s", d, first)
	}
	// A spec with no root, process or linux section has a digest too.
	mustDigest(t, &specs.Spec{Version: specs.Version})
}
