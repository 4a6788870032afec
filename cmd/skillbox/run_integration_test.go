//go:build integration

package main

// End-to-end tests of `skillbox run`: the real binary (SKILLBOX_BIN, or built
// once by TestMain in daemon_integration_test.go), real runsc and runc
// sandboxes, the images in SKILLBOX_IMAGES (default /var/lib/skillbox/images).
// The same table runs on both runtimes, with skills made under a temp dir.
// Without root, a runtime or an image the tests skip and say why. Run with
//
//	go test -tags integration ./cmd/skillbox/ -run 'TestRun' -v
//
// Set SKILLBOX_TEST_BUILD=1 to also check that a missing image is built on
// first use (it builds the shell image into a temp store: minutes).
// Nothing asserts on timing: the machine may have two busy cores.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// runItCallLimit bounds one `skillbox run` (a sandbox on a loaded machine).
const runItCallLimit = 5 * time.Minute

var (
	runItImagesOnce sync.Once
	runItBuilt      map[string]bool
	runItImagesErr  error
)

// runItNeed skips unless the machine can run sandboxes with rt.
func runItNeed(t *testing.T, rt string) {
	t.Helper()
	if itSkip != "" {
		runtimetest.SkipUnlessRequired(t, "skillbox run integration tests: %s", itSkip)
	}
	if !haveBinary(rt) {
		runtimetest.SkipUnlessRequired(t, "%s is not in PATH: install it (hack/setup.sh) to run the skillbox run tests on %s", rt, rt)
	}
}

// runItNeedImage skips unless the named image is built in the test store.
func runItNeedImage(t *testing.T, name string) {
	t.Helper()
	runItImagesOnce.Do(func() {
		out, err := exec.Command(itBin, "images", "list", "--json", "--dir", itImages).Output()
		if err != nil {
			runItImagesErr = err
			return
		}
		var list []struct {
			Name  string `json:"name"`
			Built bool   `json:"built"`
		}
		if err := json.Unmarshal(out, &list); err != nil {
			runItImagesErr = err
			return
		}
		runItBuilt = map[string]bool{}
		for _, e := range list {
			runItBuilt[e.Name] = e.Built
		}
	})
	if runItImagesErr != nil {
		runtimetest.SkipUnlessRequired(t, "cannot list the images in %s (%v): build them with `skillbox images build`", itImages, runItImagesErr)
	}
	if !runItBuilt[name] {
		runtimetest.SkipUnlessRequired(t, "image %q is not built in %s: run `skillbox images build %s` (or set SKILLBOX_IMAGES)", name, itImages, name)
	}
}

// runOut is one finished `skillbox` process.
type runOut struct {
	stdout, stderr string
	code           int
}

func (o runOut) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", o.code, o.stdout, o.stderr)
}

// runItExec runs the skillbox binary with args; the image store is the test one.
func runItExec(t *testing.T, args ...string) runOut {
	t.Helper()
	return runItExecWithin(t, runItCallLimit, args...)
}

// runItExecWithin is runItExec with a bound of its own (a run that builds
// its image first takes minutes more on a loaded machine).
func runItExecWithin(t *testing.T, limit time.Duration, args ...string) runOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, itBin, args...)
	cmd.Env = append(os.Environ(), "SKILLBOX_IMAGES="+itImages)
	return runItWait(t, ctx, cmd, limit)
}

// runItWait runs cmd (made with ctx, whose deadline is limit) to its end.
func runItWait(t *testing.T, ctx context.Context, cmd *exec.Cmd, limit time.Duration) runOut {
	t.Helper()
	args := cmd.Args[1:]
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	o := runOut{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		o.code = ee.ExitCode()
	default:
		t.Fatalf("skillbox %q: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("skillbox %q did not finish within %s\n%s", args, limit, o)
	}
	return o
}

// runItWantError checks a refused run: exit code, a single "skillbox: …"
// line on stderr mentioning every part of want, nothing on stdout.
func runItWantError(t *testing.T, what string, o runOut, code int, want ...string) {
	t.Helper()
	if o.code != code {
		t.Fatalf("%s: want exit %d\n%s", what, code, o)
	}
	msg := strings.TrimSpace(o.stderr)
	if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "skillbox: ") {
		t.Errorf("%s: want one 'skillbox: …' line on stderr\n%s", what, o)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: %q does not mention %q", what, msg, w)
		}
	}
	if o.stdout != "" {
		t.Errorf("%s: stdout should be empty: %q", what, o.stdout)
	}
}

// ---- fixtures ----

// The test skills. Hello scripts print their args joined by "|" on stdout,
// a note on stderr, and exit with their first arg when it is a number.
var runItScripts = map[string]string{
	"scripts/hello.py": `import sys
print("hello py args=" + "|".join(sys.argv[1:]))
print("note py", file=sys.stderr)
a = sys.argv[1] if len(sys.argv) > 1 else ""
sys.exit(int(a) if a.isdigit() else 0)
`,
	"scripts/hello.sh": `IFS='|'
echo "hello sh args=$*"
echo "note sh" >&2
case "${1:-}" in ''|*[!0-9]*) exit 0;; *) exit "$1";; esac
`,
	"scripts/hello.js": `const a = process.argv.slice(2);
console.log("hello js args=" + a.join("|"));
console.error("note js");
process.exitCode = /^[0-9]+$/.test(a[0] || "") ? Number(a[0]) : 0;
`,
	"scripts/pytool":  "#!/usr/bin/env python3\nimport sys\nprint('major=%d' % sys.version_info[0])\n",
	"scripts/tool.rb": "puts 'ruby'\n",
	"scripts/input.sh": `echo "cwd=$(pwd)"
cat input.txt
`,
	"scripts/outputs.sh": `set -e
mkdir -p outputs/nested/deeper
echo top > outputs/top.txt
echo deep > outputs/nested/deeper/file.txt
ln -s /etc/passwd outputs/passwd-link
echo wrote
`,
	"scripts/env.sh":     `echo "FOO=${FOO-unset}"` + "\n",
	"scripts/sleep.sh":   "echo started\nexec sleep 120\n",
	"scripts/version.sh": "cat /proc/version\n",
}

type runFixture struct {
	base  string // 0755 temp dir (sandboxes' mapped uids must traverse it)
	root  string // the skill root
	input string // a host file for --file
}

// newRunFixture writes skills run-tests, guarded-run and denied-run.
func newRunFixture(t *testing.T) *runFixture {
	t.Helper()
	base, err := os.MkdirTemp("", "sbrun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept %s for inspection", base)
			return
		}
		os.RemoveAll(base)
	})
	f := &runFixture{base: base, root: filepath.Join(base, "skills"), input: filepath.Join(base, "host", "input.txt")}
	for _, name := range []string{"run-tests", "guarded-run", "denied-run"} {
		files := map[string]string{
			"SKILL.md": fmt.Sprintf("---\nname: %s\ndescription: Test skill for skillbox run integration tests. Use only in tests.\n---\n# %s\n\nRun scripts/hello.sh.\n", name, name),
		}
		for p, s := range runItScripts {
			files[p] = s
		}
		for p, s := range files {
			runItWriteFile(t, filepath.Join(f.root, name, p), s)
		}
	}
	runItWriteFile(t, f.input, "payload-42\n")
	// Every directory readable and searchable by the sandboxes' uids.
	err = filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func runItWriteFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeConfig writes a config with the given audit dir ("" for none) and the
// test policy: deny runs for denied-*, confirm them for guarded-*.
func (f *runFixture) writeConfig(t *testing.T, name, auditDir string) string {
	t.Helper()
	daemon := ""
	if auditDir != "" {
		daemon = fmt.Sprintf("daemon {\n  audit_dir = %q\n}\n", auditDir)
	}
	cfg := daemon + `
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script"]
  env    = ["FOO"]
}

policy "no-runs" {
  skills = ["denied-*"]
  deny   = ["skills.run_script"]
}

policy "ask-first" {
  skills  = ["guarded-*"]
  confirm = ["skills.run_script"]
}
`
	p := filepath.Join(f.base, name)
	runItWriteFile(t, p, cfg)
	return p
}

// runItJSON decodes what --json prints loosely so a missing field is
// told apart from a zero one.
func runItJSON(t *testing.T, o runOut) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(o.stdout), &m); err != nil {
		t.Fatalf("--json output is not one JSON object: %v\n%s", err, o)
	}
	return m
}

// ---- the table, on both runtimes ----

type runCase struct {
	name string
	fn   func(t *testing.T, h *runHarness)
}

type runHarness struct {
	rt string
	f  *runFixture
}

// run is `skillbox run --runtime RT --root ROOT args...`.
func (h *runHarness) run(t *testing.T, args ...string) runOut {
	t.Helper()
	return runItExec(t, append([]string{"run", "--runtime", h.rt, "--root", h.f.root}, args...)...)
}

func TestRunEndToEnd(t *testing.T) {
	for _, rt := range []string{"runsc", "runc"} {
		t.Run(rt, func(t *testing.T) {
			runItNeed(t, rt)
			h := &runHarness{rt: rt, f: newRunFixture(t)}
			for _, tc := range runCases {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
			}
		})
	}
}

var runCases = []runCase{
	{"hello-py", func(t *testing.T, h *runHarness) { runItHello(t, h, "py", "python") }},
	{"hello-sh", func(t *testing.T, h *runHarness) { runItHello(t, h, "sh", "shell") }},
	{"hello-js", func(t *testing.T, h *runHarness) { runItHello(t, h, "js", "node") }},
	{"shebang-without-extension", func(t *testing.T, h *runHarness) {
		runItNeedImage(t, "python")
		o := h.run(t, "--json", "run-tests", "scripts/pytool")
		if o.code != 0 {
			t.Fatalf("shebang script:\n%s", o)
		}
		m := runItJSON(t, o)
		if m["image"] != "python" || !strings.Contains(fmt.Sprint(m["stdout"]), "major=3") {
			t.Errorf("a #!/usr/bin/env python3 script should run in the python image: image %v, stdout %q", m["image"], m["stdout"])
		}
	}},
	{"unknown-extension", func(t *testing.T, h *runHarness) {
		o := h.run(t, "run-tests", "scripts/tool.rb")
		runItWantError(t, ".rb script", o, 1, `".rb"`, "image block")
	}},
	{"file-input", func(t *testing.T, h *runHarness) {
		runItNeedImage(t, "shell")
		o := h.run(t, "--file", h.f.input, "run-tests", "scripts/input.sh")
		if o.code != 0 || !strings.Contains(o.stdout, "cwd=/work") || !strings.Contains(o.stdout, "payload-42") {
			t.Fatalf("--file input.txt should be readable as ./input.txt:\n%s", o)
		}
	}},
	{"outputs", func(t *testing.T, h *runHarness) {
		runItNeedImage(t, "shell")
		dir := filepath.Join(h.f.base, "outputs-"+h.rt, "not-yet")
		o := h.run(t, "--outputs", dir, "run-tests", "scripts/outputs.sh")
		if o.code != 0 || !strings.Contains(o.stdout, "wrote") {
			t.Fatalf("outputs.sh:\n%s", o)
		}
		for p, want := range map[string]string{"outputs/top.txt": "top\n", "outputs/nested/deeper/file.txt": "deep\n"} {
			got, err := os.ReadFile(filepath.Join(dir, p))
			if err != nil || string(got) != want {
				t.Errorf("--outputs %s: %q, %v\n%s", p, got, err, o)
			}
		}
		if _, err := os.Lstat(filepath.Join(dir, "outputs", "passwd-link")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a symlink to /etc/passwd in outputs/ was copied out (%v)", err)
		}
		if !strings.Contains(o.stderr, "passwd-link") {
			t.Errorf("stderr should say passwd-link was not collected:\n%s", o)
		}
	}},
	{"json", func(t *testing.T, h *runHarness) {
		runItNeedImage(t, "python")
		o := h.run(t, "--json", "run-tests", "scripts/hello.py", "--", "3", "x")
		if o.code != 3 {
			t.Fatalf("--json still exits with the script's code (3):\n%s", o)
		}
		m := runItJSON(t, o)
		for _, k := range []string{"run_id", "exit_code", "signal", "reason", "stdout", "stderr", "stdout_truncated",
			"stderr_truncated", "duration_ms", "image", "image_digest", "runtime", "runtime_version", "limits", "outputs"} {
			if _, ok := m[k]; !ok {
				t.Errorf("--json lacks %q", k)
			}
		}
		check := func(k string, want any) {
			if fmt.Sprint(m[k]) != fmt.Sprint(want) {
				t.Errorf("--json %s = %v, want %v", k, m[k], want)
			}
		}
		check("exit_code", 3)
		check("signal", "")
		check("reason", "exit")
		check("stdout", "hello py args=3|x\n")
		check("stderr", "note py\n")
		check("stdout_truncated", false)
		check("stderr_truncated", false)
		check("runtime", h.rt)
		check("image", "python")
		if d, _ := m["image_digest"].(string); !strings.HasPrefix(d, "sha256:") {
			t.Errorf("--json image_digest = %v, want sha256:…", m["image_digest"])
		}
		if d, ok := m["duration_ms"].(float64); !ok || d < 0 {
			t.Errorf("--json duration_ms = %v", m["duration_ms"])
		}
		if o.stderr != "" {
			t.Errorf("--json should not stream the script's stderr: %q", o.stderr)
		}
	}},
	{"env", func(t *testing.T, h *runHarness) {
		runItNeedImage(t, "shell")
		// FOO is not in the default allowlist; a rule's env lets it in.
		o := h.run(t, "--env", "FOO=bar", "run-tests", "scripts/env.sh")
		runItWantError(t, "--env FOO=bar without a rule", o, 1, "FOO", "env = [")
		cfg := h.f.writeConfig(t, "env.hcl", "")
		o = h.run(t, "--config", cfg, "--env", "FOO=bar", "run-tests", "scripts/env.sh")
		if o.code != 0 || o.stdout != "FOO=bar\n" {
			t.Fatalf("--env FOO=bar:\n%s", o)
		}
		o = h.run(t, "--env", "LD_PRELOAD=x", "run-tests", "scripts/env.sh")
		runItWantError(t, "--env LD_PRELOAD=x", o, 2, "LD_PRELOAD", "refused")
	}},
	{"script-path-confined", func(t *testing.T, h *runHarness) {
		for p, want := range map[string]string{"SKILL.md": "no interpreter", "../x": `".."`, "/etc/passwd": "absolute",
			"scripts/../SKILL.md": `".."`, "scripts/missing.sh": "not found"} {
			o := h.run(t, "run-tests", p)
			runItWantError(t, "SCRIPT "+p, o, 1, want)
		}
	}},
	{"timeout", func(t *testing.T, h *runHarness) {
		runItNeedImage(t, "shell")
		o := h.run(t, "--timeout", "2s", "--json", "run-tests", "scripts/sleep.sh")
		m := runItJSON(t, o)
		if m["reason"] != "timeout" || o.code == 0 {
			t.Fatalf("--timeout 2s on a sleeping script: reason %v, exit %d\n%s", m["reason"], o.code, o)
		}
		if !strings.Contains(fmt.Sprint(m["stdout"]), "started") {
			t.Errorf("output before the timeout is kept: %q", m["stdout"])
		}
		o = h.run(t, "--timeout", "2s", "run-tests", "scripts/sleep.sh")
		if o.code == 0 || !strings.Contains(o.stderr, "time limit") {
			t.Errorf("--timeout without --json should say why it ended:\n%s", o)
		}
	}},
	{"unknown-skill", func(t *testing.T, h *runHarness) {
		o := h.run(t, "no-such-skill", "scripts/hello.py")
		runItWantError(t, "unknown skill", o, 1, `"no-such-skill"`, "skillbox skills list")
	}},
	{"proc-version", func(t *testing.T, h *runHarness) {
		runItNeedImage(t, "shell")
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			t.Fatal(err)
		}
		host := unix.ByteSliceToString(u.Release[:])
		o := h.run(t, "run-tests", "scripts/version.sh")
		if o.code != 0 || o.stdout == "" {
			t.Fatalf("cat /proc/version:\n%s", o)
		}
		if h.rt == "runsc" && strings.Contains(o.stdout, host) {
			t.Errorf("under runsc /proc/version shows the host kernel %s: %q", host, o.stdout)
		}
		if h.rt == "runc" && !strings.Contains(o.stdout, host) {
			t.Errorf("under runc /proc/version should be the host's (%s): %q", host, o.stdout)
		}
	}},
	{"no-build-empty-store", func(t *testing.T, h *runHarness) {
		empty := filepath.Join(h.f.base, "empty-images-"+h.rt)
		o := h.run(t, "--no-build", "--images", empty, "run-tests", "scripts/hello.sh")
		runItWantError(t, "--no-build with an empty store", o, 1, `"shell"`, "--no-build", "skillbox images build")
	}},
	{"policy-deny", func(t *testing.T, h *runHarness) {
		cfg := h.f.writeConfig(t, "deny-"+h.rt+".hcl", "")
		o := h.run(t, "--config", cfg, "denied-run", "scripts/hello.sh")
		runItWantError(t, "denied skill", o, 1, `policy "no-runs"`, filepath.Base(cfg)+":", "denied")
		// --yes does not override a deny.
		o = h.run(t, "--config", cfg, "--yes", "denied-run", "scripts/hello.sh")
		runItWantError(t, "denied skill with --yes", o, 1, `policy "no-runs"`)
	}},
	{"policy-confirm", func(t *testing.T, h *runHarness) {
		runItNeedImage(t, "shell")
		cfg := h.f.writeConfig(t, "confirm-"+h.rt+".hcl", "")
		o := h.run(t, "--config", cfg, "guarded-run", "scripts/hello.sh")
		runItWantError(t, "confirm without --yes", o, 1, `policy "ask-first"`, "--yes")
		o = h.run(t, "--config", cfg, "--yes", "guarded-run", "scripts/hello.sh", "--", "ok")
		if o.code != 0 || o.stdout != "hello sh args=ok\n" {
			t.Fatalf("confirm with --yes should run:\n%s", o)
		}
	}},
	{"audit", func(t *testing.T, h *runHarness) {
		runItNeedImage(t, "shell")
		auditDir := filepath.Join(h.f.base, "audit-"+h.rt)
		cfg := h.f.writeConfig(t, "audit-"+h.rt+".hcl", auditDir)
		if o := h.run(t, "--config", cfg, "run-tests", "scripts/hello.sh", "--", "5"); o.code != 5 {
			t.Fatalf("audited run:\n%s", o)
		}
		if o := h.run(t, "--config", cfg, "--yes", "guarded-run", "scripts/hello.sh"); o.code != 0 {
			t.Fatalf("audited confirmed run:\n%s", o)
		}
		if o := h.run(t, "--config", cfg, "denied-run", "scripts/hello.sh"); o.code != 1 {
			t.Fatalf("audited denied run:\n%s", o)
		}
		if o := runItExec(t, "audit", "verify", "--dir", auditDir); o.code != 0 {
			t.Fatalf("audit verify after runs:\n%s", o)
		}
		o := runItExec(t, "audit", "query", "--dir", auditDir, "--json")
		if o.code != 0 {
			t.Fatalf("audit query:\n%s", o)
		}
		type rec struct {
			Event   string `json:"event"`
			Outcome string `json:"outcome"`
			Skill   *struct {
				Name string `json:"name"`
			} `json:"skill"`
			Run *struct {
				Runtime     string `json:"runtime"`
				ImageDigest string `json:"image_digest"`
				ExitCode    *int   `json:"exit_code"`
			} `json:"run"`
			Decision *struct {
				Effect string `json:"effect"`
				Rule   string `json:"rule"`
			} `json:"decision"`
		}
		var starts, ends, approvals, denies int
		for _, line := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
			var r rec
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("audit query --json line %q: %v", line, err)
			}
			switch r.Event {
			case "run.start":
				starts++
				if r.Run == nil || r.Run.Runtime != h.rt || !strings.HasPrefix(r.Run.ImageDigest, "sha256:") {
					t.Errorf("run.start lacks runtime/image digest: %s", line)
				}
			case "run.end":
				ends++
				if r.Skill != nil && r.Skill.Name == "run-tests" && (r.Run == nil || r.Run.ExitCode == nil || *r.Run.ExitCode != 5) {
					t.Errorf("run.end of run-tests should record exit code 5: %s", line)
				}
			case "confirmation.approve":
				approvals++
			case "policy.decision":
				if r.Decision != nil && r.Decision.Effect == "deny" && strings.Contains(r.Decision.Rule, "no-runs") {
					denies++
				}
			}
		}
		if starts != 2 || ends != 2 || approvals != 1 || denies != 1 {
			t.Errorf("audit: %d run.start, %d run.end, %d confirmation.approve, %d deny decisions; want 2, 2, 1, 1\n%s", starts, ends, approvals, denies, o.stdout)
		}
		table := runItExec(t, "audit", "query", "--dir", auditDir, "--event", "run")
		if !strings.Contains(table.stdout, "run.start") || !strings.Contains(table.stdout, "run.end") {
			t.Errorf("audit query --event run should show run.start and run.end:\n%s", table)
		}
	}},
}

// runItHello runs the hello script of one language with args, then with an
// exit code, checking stdout and stderr stay apart.
func runItHello(t *testing.T, h *runHarness, ext, image string) {
	runItNeedImage(t, image)
	script := "scripts/hello." + ext
	o := h.run(t, "run-tests", script, "--", "a", "b c")
	if o.code != 0 {
		t.Fatalf("%s a 'b c':\n%s", script, o)
	}
	if want := "hello " + ext + " args=a|b c\n"; o.stdout != want {
		t.Errorf("%s: stdout %q, want %q", script, o.stdout, want)
	}
	if !strings.Contains(o.stderr, "note "+ext) || strings.Contains(o.stdout, "note") || strings.Contains(o.stderr, "hello") {
		t.Errorf("%s: stdout and stderr mixed up\n%s", script, o)
	}
	o = h.run(t, "run-tests", script, "3")
	if o.code != 3 || o.stdout != "hello "+ext+" args=3\n" {
		t.Errorf("%s 3: want exit 3\n%s", script, o)
	}
}

// TestRunBuildsMissingImage checks that a run whose image is missing builds
// it first, with progress on stderr. Opt-in: it takes minutes.
func TestRunBuildsMissingImage(t *testing.T) {
	runItNeed(t, "runsc")
	if os.Getenv("SKILLBOX_TEST_BUILD") != "1" {
		t.Skip("building an image takes minutes: set SKILLBOX_TEST_BUILD=1 to check that skillbox run builds a missing image")
	}
	f := newRunFixture(t)
	store := filepath.Join(f.base, "images")
	o := runItExecWithin(t, 15*time.Minute, "run", "--images", store, "--root", f.root, "run-tests", "scripts/hello.sh", "--", "built")
	if o.code != 0 || o.stdout != "hello sh args=built\n" {
		t.Fatalf("run with a missing image:\n%s", o)
	}
	if !strings.Contains(o.stderr, `image "shell" is not built`) || !strings.Contains(o.stderr, "[shell]") {
		t.Errorf("the build's progress should be on stderr:\n%s", o)
	}
	o = runItExec(t, "run", "--no-build", "--images", store, "--root", f.root, "run-tests", "scripts/hello.sh")
	if o.code != 0 || strings.Contains(o.stderr, "[shell]") {
		t.Errorf("the second run should use the built image:\n%s", o)
	}
}
