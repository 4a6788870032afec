package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
)

var update = flag.Bool("update", false, "rewrite runtime/testdata/*.golden.json from BuildSpec")

func goldenJob() runtime.Job {
	return runtime.Job{
		Sandbox:    runtime.SandboxSpec{ID: "skillbox-golden-1", RootFS: "/var/lib/skillbox/images/python/rootfs", SkillDir: "/srv/skills/pdf"},
		Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/extract.py", "in.pdf"}, Env: []string{"FOO=bar", "LANG=de_DE.UTF-8"}},
	}
}

// The goldens pin the whole spec; the tests below them state the properties
// that matter one by one, so a golden diff is reviewed against them.
var goldenCases = []struct {
	name string
	job  func() runtime.Job
	opts SpecOptions
	arch string // only compared when built for this GOARCH ("" any)
}{
	{
		name: "runsc_default",
		job:  goldenJob,
		opts: SpecOptions{WorkdirSource: "/run/skillbox/runs/skillbox-golden-1/work", HostsSource: "/run/skillbox/runs/skillbox-golden-1/hosts"},
	},
	{
		name: "runc_hardened",
		job: func() runtime.Job {
			j := goldenJob()
			j.Sandbox.Limits = runtime.Limits{MemoryBytes: 256 << 20, Pids: 64, CPUs: 2, TmpBytes: 8 << 20}
			j.Invocation.Limits = runtime.Limits{Timeout: time.Minute}
			return j
		},
		opts: SpecOptions{
			WorkdirSource: "/run/skillbox/runs/skillbox-golden-1/work",
			HostsSource:   "/run/skillbox/runs/skillbox-golden-1/hosts",
			Seccomp:       true,
			CgroupNS:      true,
			MaskHostInfo:  true,
			SwapLimit:     true,
			UserNS:        &IDMap{HostUID: DefaultUserNSBase, HostGID: DefaultUserNSBase, Size: 65536},
		},
		arch: "amd64",
	},
	{
		// An ordinary user's gVisor sandbox: uid 0 of gVisor without
		// capabilities, RLIMIT_NPROC, no cgroup and no resources.
		name: "runsc_rootless",
		job:  goldenJob,
		opts: SpecOptions{
			WorkdirSource: "/home/u/.local/state/skillbox/runs/skillbox-golden-1/work",
			HostsSource:   "/home/u/.local/state/skillbox/runs/skillbox-golden-1/hosts",
			Rootless:      true,
		},
	},
	{
		name: "network_netns",
		job: func() runtime.Job {
			j := goldenJob()
			j.Sandbox.Network = true
			j.Sandbox.Limits = runtime.Limits{CPUs: 0.5}
			return j
		},
		opts: SpecOptions{
			WorkdirSource: "/run/skillbox/runs/skillbox-golden-1/work",
			HostsSource:   "/run/skillbox/runs/skillbox-golden-1/hosts",
			NetNS:         "/var/run/netns/skillbox",
			CgroupsPath:   "/custom/parent/skillbox-golden-1",
		},
	},
	{
		name: "egress",
		job: func() runtime.Job {
			j := goldenJob()
			j.Sandbox.Egress = &egress.Config{}
			return j
		},
		opts: SpecOptions{
			WorkdirSource:    "/run/skillbox/runs/skillbox-golden-1/work",
			HostsSource:      "/run/skillbox/runs/skillbox-golden-1/hosts",
			NetNS:            "/run/netns/skillbox-eg-s-skillbox-golden-1",
			ResolvConfSource: "/run/skillbox/runs/skillbox-golden-1/resolv.conf",
			EgressEnv:        []string{"HTTPS_PROXY=http://100.64.0.1:3128", "HTTP_PROXY=http://100.64.0.1:3128"},
			Seccomp:          true,
			CgroupNS:         true,
			UserNS:           &IDMap{HostUID: DefaultUserNSBase, HostGID: DefaultUserNSBase, Size: 65536},
		},
		arch: "amd64",
	},
	{
		name: "run_code_skills",
		job:  codeJob,
		opts: SpecOptions{
			WorkdirSource: "/run/skillbox/runs/skillbox-golden-1/work",
			HostsSource:   "/run/skillbox/runs/skillbox-golden-1/hosts",
			SkillsSource:  "/run/skillbox/runs/skillbox-golden-1/skills",
		},
	},
}

func TestBuildSpecGolden(t *testing.T) {
	for _, gc := range goldenCases {
		t.Run(gc.name, func(t *testing.T) {
			if gc.arch != "" && gc.arch != goruntime.GOARCH {
				t.Skipf("golden made for %s (seccomp architectures differ)", gc.arch)
			}
			s, err := BuildSpec(gc.job(), gc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(s, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", gc.name+".golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./runtime -run Golden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("BuildSpec differs from %s (if intended, rerun with -update and review the diff):\n%s", path, firstDiff(string(want), string(got)))
			}
		})
	}
}

func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\n  want: " + w + "\n  got:  " + g
		}
	}
	return ""
}

func mustSpec(t *testing.T, job runtime.Job, opts SpecOptions) *specs.Spec {
	t.Helper()
	if opts.WorkdirSource == "" {
		opts.WorkdirSource = "/run/skillbox/runs/x/work"
	}
	if opts.HostsSource == "" {
		opts.HostsSource = "/run/skillbox/runs/x/hosts"
	}
	s, err := BuildSpec(job, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func findMount(s *specs.Spec, dest string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dest {
			return &s.Mounts[i]
		}
	}
	return nil
}

func TestSpecIsolationProperties(t *testing.T) {
	s := mustSpec(t, goldenJob(), SpecOptions{})
	p := s.Process
	if p.User.UID != 65534 || p.User.GID != 65534 || len(p.User.AdditionalGids) != 0 {
		t.Errorf("user %+v, want 65534:65534", p.User)
	}
	if !p.NoNewPrivileges {
		t.Error("noNewPrivileges off")
	}
	c := p.Capabilities
	if c == nil || len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) != 0 {
		t.Errorf("capabilities %+v, want a non-nil set of empty lists", c)
	}
	if p.Cwd != "/work" || p.Terminal {
		t.Errorf("cwd %q terminal %v", p.Cwd, p.Terminal)
	}
	if !s.Root.Readonly || s.Root.Path != "/var/lib/skillbox/images/python/rootfs" {
		t.Errorf("root %+v", s.Root)
	}
	if s.Hostname != "skillbox" {
		t.Errorf("hostname %q", s.Hostname)
	}
	if m := findMount(s, "/skill"); m == nil || m.Source != "/srv/skills/pdf" || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") {
		t.Errorf("/skill mount %+v", m)
	}
	if m := findMount(s, "/work"); m == nil || m.Type != "bind" || !slices.Contains(m.Options, "rw") || !slices.Contains(m.Options, "nodev") {
		t.Errorf("/work mount %+v", m)
	}
	if m := findMount(s, "/tmp"); m == nil || m.Type != "tmpfs" || !slices.Contains(m.Options, "size=268435456") {
		t.Errorf("/tmp mount %+v", m)
	}
	if m := findMount(s, "/etc/hosts"); m == nil || m.Type != "bind" || m.Source != "/run/skillbox/runs/x/hosts" || !slices.Contains(m.Options, "ro") {
		t.Errorf("/etc/hosts mount %+v", m)
	}
	var netns *specs.LinuxNamespace
	for i, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			netns = &s.Linux.Namespaces[i]
		}
	}
	if netns == nil || netns.Path != "" {
		t.Errorf("want a fresh (empty) network namespace, got %+v", netns)
	}
	r := s.Linux.Resources
	if *r.Memory.Limit != runtime.DefaultLimits.MemoryBytes || r.Memory.Swap != nil || *r.Pids.Limit != runtime.DefaultLimits.Pids ||
		*r.CPU.Quota != 100000 || *r.CPU.Period != 100000 {
		t.Errorf("resources %+v %+v %+v", r.Memory, r.Pids, r.CPU)
	}
	if s.Linux.CgroupsPath != "/skillbox/skillbox-golden-1" {
		t.Errorf("cgroups path %q", s.Linux.CgroupsPath)
	}
	for _, want := range []string{"/proc/kcore", "/proc/keys", "/sys/firmware"} {
		if !slices.Contains(s.Linux.MaskedPaths, want) {
			t.Errorf("%s not masked", want)
		}
	}
	if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Error("/proc/sys not read-only")
	}
	if s.Linux.Seccomp != nil || s.Linux.UIDMappings != nil {
		t.Error("seccomp/userns without being asked for")
	}
	if !slices.ContainsFunc(p.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == "RLIMIT_NOFILE" && r.Hard == 1024 }) {
		t.Errorf("rlimits %+v", p.Rlimits)
	}
	env := strings.Join(p.Env, "\n")
	if env != "PATH="+runtime.DefaultPath+"\nHOME=/tmp\nLANG=de_DE.UTF-8\nFOO=bar" {
		t.Errorf("env %q", p.Env)
	}
}

func TestSpecOptions(t *testing.T) {
	job := goldenJob()
	job.Sandbox.Limits = runtime.Limits{CPUs: 0.25, MemoryBytes: 100 << 20}
	s := mustSpec(t, job, SpecOptions{Seccomp: true, SwapLimit: true, CgroupNS: true,
		UserNS: &IDMap{HostUID: 200000, HostGID: 300000, Size: 65536}})
	if *s.Linux.Resources.CPU.Quota != 25000 || *s.Linux.Resources.Memory.Swap != 100<<20 {
		t.Errorf("cpu quota %d swap %d", *s.Linux.Resources.CPU.Quota, *s.Linux.Resources.Memory.Swap)
	}
	if s.Linux.UIDMappings[0] != (specs.LinuxIDMapping{ContainerID: 0, HostID: 200000, Size: 65536}) ||
		s.Linux.GIDMappings[0].HostID != 300000 {
		t.Errorf("mappings %+v %+v", s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
	types := map[specs.LinuxNamespaceType]bool{}
	for _, ns := range s.Linux.Namespaces {
		types[ns.Type] = true
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace,
		specs.MountNamespace, specs.NetworkNamespace, specs.CgroupNamespace, specs.UserNamespace} {
		if !types[want] {
			t.Errorf("namespace %s missing", want)
		}
	}
	sc := s.Linux.Seccomp
	if sc == nil || sc.DefaultAction != specs.ActErrno {
		t.Fatalf("seccomp %+v", sc)
	}
	allowed := map[string]bool{}
	for _, r := range sc.Syscalls {
		if r.Action == specs.ActAllow && len(r.Args) == 0 {
			for _, n := range r.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range []string{"read", "write", "execve", "openat", "futex", "exit_group"} {
		if !allowed[n] {
			t.Errorf("seccomp denies %s", n)
		}
	}
	for _, n := range []string{"mount", "unshare", "setns", "ptrace", "bpf", "keyctl", "kexec_load", "init_module",
		"perf_event_open", "userfaultfd", "io_uring_setup", "open_by_handle_at", "pivot_root", "reboot", "clone3"} {
		if allowed[n] {
			t.Errorf("seccomp allows %s unconditionally", n)
		}
	}

	// Tiny CPU shares still get the kernel's minimum quota.
	job.Sandbox.Limits = runtime.Limits{CPUs: 0.001}
	s = mustSpec(t, job, SpecOptions{})
	if *s.Linux.Resources.CPU.Quota != 1000 {
		t.Errorf("quota %d", *s.Linux.Resources.CPU.Quota)
	}
}

func TestSpecNetwork(t *testing.T) {
	job := goldenJob()
	job.Sandbox.Network = true
	if _, err := BuildSpec(job, SpecOptions{WorkdirSource: "/w", HostsSource: "/h"}); !errors.Is(err, runtime.ErrUnavailable) {
		t.Errorf("network without netns: %v, want ErrUnavailable", err)
	}
	s := mustSpec(t, job, SpecOptions{NetNS: "/var/run/netns/x"})
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace && ns.Path != "/var/run/netns/x" {
			t.Errorf("netns %+v", ns)
		}
	}
	if findMount(s, "/sys") != nil {
		t.Error("sysfs needs its own network namespace")
	}
}

func TestLimitsDefaults(t *testing.T) {
	if got := (runtime.Limits{}).WithDefaults(); got != runtime.DefaultLimits {
		t.Errorf("zero limits: %+v, want %+v", got, runtime.DefaultLimits)
	}
	got := runtime.Limits{Timeout: time.Second, Pids: 7, MemoryBytes: -1}.WithDefaults()
	want := runtime.DefaultLimits
	want.Timeout, want.Pids = time.Second, 7
	if got != want {
		t.Errorf("partial limits: %+v, want %+v", got, want)
	}
	// The documented defaults, so a change to them is a conscious one.
	d := runtime.DefaultLimits
	if d.Timeout != 30*time.Second || d.MemoryBytes != 512<<20 || d.Pids != 128 || d.CPUs != 1 ||
		d.WorkdirBytes != 1<<30 || d.TmpBytes != 256<<20 || d.StdoutBytes != 1<<20 || d.StderrBytes != 1<<20 ||
		d.OutputBytes != 512<<20 || d.OutputFiles != 20000 || d.OutputFileBytes != 256<<20 {
		t.Errorf("DefaultLimits changed: %+v", d)
	}
	// A job's zero limits reach the spec as the defaults.
	s, err := BuildSpec(goldenJob(), SpecOptions{WorkdirSource: "/w", HostsSource: "/h"})
	if err != nil {
		t.Fatal(err)
	}
	if *s.Linux.Resources.Pids.Limit != 128 || findMount(s, "/tmp").Options[3] != "size=268435456" {
		t.Errorf("defaults not applied: pids %d, /tmp %v", *s.Linux.Resources.Pids.Limit, findMount(s, "/tmp").Options)
	}
}
