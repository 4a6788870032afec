//go:build integration

package main

// skillbox as an ordinary user (uid 65534, who owns nothing and may do
// nothing as root): `skillbox run`, `exec` and a self-contained `skillbox
// mcp` on gVisor rootless, from the system's image store, with the limits
// each run says it had enforced and how.

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// rootlessUID is the ordinary user of these tests.
const rootlessUID = 65534

// rootlessHome is a home of that user's, with a copy of the binary (the
// test's build dir may be root's alone), skills, a project and a config.
type rootlessHome struct {
	dir, bin, root, project, cfg, audit string
}

func newRootlessHome(t *testing.T) *rootlessHome {
	t.Helper()
	dir, err := os.MkdirTemp("", "skillbox-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &rootlessHome{dir: dir, bin: filepath.Join(dir, "skillbox"), root: filepath.Join(dir, "skills"),
		project: filepath.Join(dir, "project"), cfg: filepath.Join(dir, "skillbox.hcl"), audit: filepath.Join(dir, "audit")}
	raw, err := os.ReadFile(itBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, filepath.Join(h.root, "probe"), map[string]string{
		"SKILL.md":        "---\nname: probe\ndescription: Runs what it is given, to probe the sandbox.\n---\nRun scripts/py.py CODE.\n",
		"scripts/py.py":   "import sys\nexec(sys.argv[1])\n",
		"scripts/hog.py":  "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n",
		"scripts/hi.sh":   "echo hello from $(id -u) in $(uname -r)\n",
		"scripts/wait.sh": "echo up\nsleep 60\n",
		"scripts/edit.py": "import os\nprint(open('in.txt').read().strip())\nopen('out.txt', 'w').write('made rootless\\n')\n",
	})
	writeFiles(t, h.project, map[string]string{"in.txt": "from the host\n"})
	writeFiles(t, dir, map[string]string{"skillbox.hcl": `
daemon { audit_dir = "` + h.audit + `" }
images { dir = "` + itImages + `" }
policy "probe" {
  skills    = ["probe"]
  tools     = ["skills.read", "skills.run_script", "skills.run_code"]
  network   = true
  workspace = "write"
}
`})
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, rootlessUID, rootlessUID)
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return h
}

// command is the binary with args as the ordinary user, in its home.
func (h *rootlessHome) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Dir = h.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.dir, "SKILLBOX_IMAGES=" + itImages}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: rootlessUID, Gid: rootlessUID, Groups: []uint32{}}}
	return cmd
}

func (h *rootlessHome) run(t *testing.T, args ...string) runOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runItCallLimit)
	defer cancel()
	return runItWait(t, ctx, h.command(ctx, args...), runItCallLimit)
}

func TestRootless(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python")
	runItNeedImage(t, "shell")
	h := newRootlessHome(t)
	base := []string{"--config", h.cfg, "--root", h.root}

	t.Run("run_with_limits_enforced_by", func(t *testing.T) {
		o := h.run(t, append([]string{"run", "--json"}, append(base, "probe", "scripts/hi.sh")...)...)
		if o.code != 0 {
			t.Fatalf("run as uid %d:\n%s", rootlessUID, o)
		}
		m := runItJSON(t, o)
		if out, _ := m["stdout"].(string); !strings.Contains(out, "hello from 0 in 4.") {
			t.Errorf("want the script as gVisor's uid 0 in gVisor's kernel: %q", out)
		}
		by, _ := m["limits_enforced_by"].(map[string]any)
		for limit, how := range map[string]string{"memory": "skillbox-poll", "pids": "gvisor-rlimit", "cpus": "none",
			"timeout": "skillbox", "workdir": "tmpfs", "tmp": "gvisor", "stdout": "skillbox"} {
			if by[limit] != how {
				t.Errorf("limits_enforced_by[%s] = %v, want %s (all: %v)", limit, by[limit], how, by)
			}
		}
		// The audit says it too.
		trail := readTrail(t, h.audit)
		if !strings.Contains(trail, `"limits_enforced_by":{`) || !strings.Contains(trail, `"memory":"skillbox-poll"`) {
			t.Errorf("the run.end record does not say how the limits were enforced:\n%s", trail)
		}
	})
	t.Run("human_output_names_unenforced", func(t *testing.T) {
		o := h.run(t, append([]string{"run"}, append(base, "probe", "scripts/hi.sh")...)...)
		if o.code != 0 || !strings.Contains(o.stderr, "not enforced on this host: cpus") {
			t.Errorf("a limit nothing enforces is said, never silent:\n%s", o)
		}
	})
	t.Run("memory_limit_held", func(t *testing.T) {
		o := h.run(t, append([]string{"run", "--json", "--memory", "128MiB"}, append(base, "probe", "scripts/hog.py")...)...)
		m := runItJSON(t, o)
		if m["reason"] != "oom" {
			t.Errorf("a hog over 128MiB: want reason oom\n%s", o)
		}
	})
	t.Run("exec_code", func(t *testing.T) {
		o := h.run(t, append([]string{"exec", "--skill", "probe", "--language", "python", "-c", "import os; print('code as', os.getuid())"}, base...)...)
		if o.code != 0 || !strings.Contains(o.stdout, "code as 0") {
			t.Errorf("exec as uid %d:\n%s", rootlessUID, o)
		}
	})
	t.Run("workdir_written_back_as_the_user", func(t *testing.T) {
		o := h.run(t, append([]string{"run", "--workdir", h.project}, append(base, "probe", "scripts/edit.py")...)...)
		if o.code != 0 || !strings.Contains(o.stdout, "from the host") {
			t.Fatalf("run --workdir:\n%s", o)
		}
		fi, err := os.Stat(filepath.Join(h.project, "out.txt"))
		if err != nil {
			t.Fatalf("the run's file is not in the project: %v\n%s", err, o)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != rootlessUID {
			t.Errorf("out.txt belongs to uid %d, want the user's %d", st.Uid, rootlessUID)
		}
	})
	t.Run("network_refused_with_why", func(t *testing.T) {
		o := h.run(t, append([]string{"run", "--network"}, append(base, "probe", "scripts/hi.sh")...)...)
		runItWantError(t, "network without root", o, 1, "network is not available without root", "run skillbox as root")
	})
	t.Run("root_only_runtime_refused", func(t *testing.T) {
		o := h.run(t, append([]string{"run", "--runtime", "runc"}, append(base, "probe", "scripts/hi.sh")...)...)
		runItWantError(t, "runc without root", o, 1, "runc runtime needs root", "--runtime runsc")
	})
	// docs/SECURITY.md's rootless host paths, checked while a run lives:
	// the user's, 0700, and nothing in them reachable by another uid.
	t.Run("host_paths_private", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := h.command(ctx, append([]string{"run"}, append(base, "probe", "scripts/wait.sh")...)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); cmd.Wait() }()
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "up\n" {
			t.Fatalf("the run did not start: %q", line)
		}
		state := filepath.Join(h.dir, ".local", "state", "skillbox")
		runs := filepath.Join(state, "runs")
		ents, err := os.ReadDir(runs)
		if err != nil || len(ents) != 1 {
			t.Fatalf("want one live run dir in %s: %v %v", runs, ents, err)
		}
		runDir := filepath.Join(runs, ents[0].Name())
		stateDirs, _ := filepath.Glob(filepath.Join(state, "runsc-*"))
		for _, p := range append([]string{runs, runDir, filepath.Join(state, "snapshots")}, stateDirs...) {
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			if st.Uid != rootlessUID || st.Mode&0o777 != 0o700 {
				t.Errorf("%s: uid %d mode %o, want uid %d mode 0700", p, st.Uid, st.Mode&0o777, rootlessUID)
			}
		}
		// Another ordinary uid reaches nothing of the run.
		for _, probe := range [][]string{{"ls", runs}, {"stat", runDir}, {"cat", filepath.Join(runDir, "config.json")}, {"ls", filepath.Join(runDir, "work")}} {
			c := exec.Command(probe[0], probe[1:]...)
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65533, Groups: []uint32{}}}
			if o, err := c.CombinedOutput(); err == nil {
				t.Errorf("uid 65533 ran %v: %s", probe, o)
			}
		}
	})
	t.Run("mcp_self_contained", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := h.command(ctx, append([]string{"mcp"}, base...)...)
		client := sdk.NewClient(&sdk.Implementation{Name: "skillbox-rootless-test", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect to skillbox mcp as uid %d: %v", rootlessUID, err)
		}
		defer cs.Close()
		if res, text := mcpCallTool(t, ctx, cs, "skills_load", map[string]any{"names": []string{"probe"}}); res.IsError {
			t.Fatalf("load: %s", text)
		}
		res, text := mcpCallTool(t, ctx, cs, "skills_run_script", map[string]any{"path": "scripts/hi.sh"})
		sc, _ := json.Marshal(res.StructuredContent)
		if res.IsError || !strings.Contains(text, "hello from 0") || !strings.Contains(string(sc), `"cpus":"none"`) {
			t.Errorf("a run through the self-contained server as uid %d: %s\n%s", rootlessUID, text, sc)
		}
	})
	// Nothing of the user's is left running: the sandboxes and the
	// namespaces end with the commands.
	waitfor.Within(10*time.Second, func() bool { return len(userProcesses(rootlessUID, h.dir)) == 0 })
	if left := userProcesses(rootlessUID, h.dir); len(left) > 0 {
		t.Errorf("processes of uid %d left: %v", rootlessUID, left)
	}
}

// readTrail is every audit file under dir.
func readTrail(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			raw, _ := os.ReadFile(p)
			b.Write(raw)
		}
		return nil
	})
	return b.String()
}

// userProcesses lists the processes of uid whose command line mentions
// marker.
func userProcesses(uid int, marker string) []string {
	var left []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", p.Name()), &st) != nil || int(st.Uid) != uid {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if strings.Contains(string(cmdline), marker) {
			left = append(left, p.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return left
}
