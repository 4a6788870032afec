package runtimetest

import (
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// The isolation cases: no network, no host files or environment, a
// read-only skill, no capabilities, no new namespaces or mounts.
func isolationCases() []Case {
	return []Case{
		{
			Name: "network_blocked",
			Skill: map[string]string{"scripts/net.py": `import socket
for host, port in (("1.1.1.1", 80), ("169.254.169.254", 80), ("127.0.0.1", 22)):
    try:
        s = socket.create_connection((host, port), timeout=5)
        print("CONNECTED", host)
    except OSError as e:
        print("blocked", host, type(e).__name__)
try:
    print("RESOLVED", socket.getaddrinfo("deb.debian.org", 80))
except OSError as e:
    print("dns blocked", type(e).__name__)
`},
			Args:   Py("net.py"),
			Limits: runtime.Limits{Timeout: 60 * time.Second},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				out := string(res.Stdout)
				if strings.Contains(out, "CONNECTED") || strings.Contains(out, "RESOLVED") || strings.Count(out, "blocked") != 4 {
					t.Errorf("network reachable:\n%s\n%s", out, res.Stderr)
				}
			},
		},
		{
			Name: "host_files_invisible",
			Skill: map[string]string{"scripts/peek.py": `import sys
for p in sys.argv[1:]:
    try:
        print(p, "READ", open(p).read())
    except OSError as e:
        print(p, "denied", type(e).__name__)
`},
			Links: map[string]string{"scripts/link": SecretPath},
			Args: func(c *CaseEnv) []string {
				return []string{"python3", "/skill/scripts/peek.py", c.Secret.Path, "/proc/1/root" + c.Secret.Path, "/skill/scripts/link", "/proc/self/root" + c.Secret.Path}
			},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				NoSecret(t, res, c.Secret.Value)
				if strings.Count(string(res.Stdout), "denied") != 4 {
					t.Errorf("want 4 denials:\n%s", res.Stdout)
				}
			},
		},
		{
			Name:  "host_env_invisible",
			Skill: map[string]string{"scripts/environ.py": "import os\nprint(dict(os.environ))\nprint(open('/proc/1/environ').read())\n"},
			Args:  Py("environ.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				NoSecret(t, res, c.EnvVal, HostEnvName)
			},
		},
		{
			Name: "skill_read_only",
			Skill: map[string]string{"scripts/write.py": `import os
for p in ("/skill/new.txt", "/skill/scripts/write.py", "/etc/passwd", "/usr/bin/new"):
    try:
        with open(p, "a") as f:
            f.write("x")
        print(p, "WRITTEN")
    except OSError as e:
        print(p, "refused", e.errno)
`},
			Args: Py("write.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if strings.Contains(string(res.Stdout), "WRITTEN") || strings.Count(string(res.Stdout), "refused") != 4 {
					t.Errorf("writes outside /work:\n%s", res.Stdout)
				}
			},
		},
		{
			Name:  "no_capabilities",
			Skill: map[string]string{"scripts/caps.py": "for l in open('/proc/self/status'):\n    if l.startswith(('Cap', 'NoNewPrivs', 'Uid', 'Gid')):\n        print(l.strip())\n"},
			Args:  Py("caps.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				out := string(res.Stdout)
				uid := "Uid:\t65534\t65534\t65534\t65534"
				if c.Rootless {
					uid = "Uid:\t0\t0\t0\t0" // gVisor's uid 0: the user on the host, still without capabilities
				}
				for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", uid} {
					if !strings.Contains(out, want) {
						t.Errorf("missing %q in\n%s", want, out)
					}
				}
				if c.Kernel == KernelHost && !strings.Contains(out, "NoNewPrivs:\t1") {
					t.Errorf("no_new_privs not set:\n%s", out)
				}
			},
		},
		{
			Name: "namespace_and_mount_refused",
			Skill: map[string]string{"scripts/ns.py": `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
r = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
print("unshare", r, ctypes.get_errno())
r = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
print("mount", r, ctypes.get_errno())
`},
			Args: Py("ns.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				out := string(res.Stdout)
				// runc: the seccomp profile refuses both with EPERM. gVisor
				// implements namespaces inside its own kernel, so there only the
				// mount (no capability) must fail.
				// A modern gVisor lets the script unshare a user namespace of
				// its own, in which it may then mount a tmpfs: all of it inside
				// gVisor's kernel, with no effect on the host.
				inOwnNS := c.Kernel == KernelGVisor && strings.Contains(out, "unshare 0 0\n")
				if !(strings.Contains(out, "mount -1 1\n") || inOwnNS) || (c.Kernel == KernelHost && !strings.Contains(out, "unshare -1 1\n")) {
					t.Errorf("want EPERM:\n%s%s", out, res.Stderr)
				}
			},
		},
	}
}
