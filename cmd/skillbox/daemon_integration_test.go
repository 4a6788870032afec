//go:build integration

package main

// End-to-end tests of `skillbox serve`: the real binary, a real socket, real
// gVisor sandboxes, the real audit log. They need root, runsc and the python
// and shell images (`skillbox images build python shell`); otherwise every
// test skips and says why. Run them with
//
//	go test -tags integration ./cmd/skillbox/ -run Daemon -v
//
// SKILLBOX_BIN names a prebuilt binary (default: built once here);
// SKILLBOX_IMAGES the image store (default /var/lib/skillbox/images).
// Nothing asserts on timing: the machine may have two busy cores, so every
// wait is generous.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/store"
)

var (
	itBin       string // the skillbox binary under test
	itRepo      string // the repository root (for examples/skills)
	itImages    string // the image store
	itSkip      string // why the tests cannot run here, "" if they can
	itBuildDir  string
	itCallLimit = 3 * time.Minute // a generous bound for any one call
)

func TestMain(m *testing.M) {
	if socket := os.Getenv(floodSocketEnv); socket != "" {
		os.Exit(floodMain(socket))
	}
	if spec := os.Getenv(listenerFloodEnv); spec != "" {
		os.Exit(listenerFloodMain(spec))
	}
	if spec := os.Getenv(listenerProbeEnv); spec != "" {
		os.Exit(listenerProbeMain(spec))
	}
	code := func() int {
		if err := setupIntegration(); err != nil {
			fmt.Fprintln(os.Stderr, "integration setup:", err)
			return 1
		}
		return m.Run()
	}()
	if itBuildDir != "" {
		os.RemoveAll(itBuildDir)
	}
	os.Exit(code)
}

// setupIntegration finds (or builds) the binary. A machine that cannot run
// the tests at all (not root) sets itSkip; what only some tests need (runsc,
// runc, images) they check themselves. Only real failures (a build that does
// not compile) are errors.
func setupIntegration() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	itRepo = filepath.Clean(filepath.Join(wd, "..", ".."))
	itImages = os.Getenv("SKILLBOX_IMAGES")
	if itImages == "" {
		itImages = "/var/lib/skillbox/images"
	}
	if os.Geteuid() != 0 {
		itSkip = "the integration tests need root (sandboxes, tmpfs mounts, a second uid): run them with sudo or `make integration`"
		return nil
	}
	if p := os.Getenv("SKILLBOX_BIN"); p != "" {
		itBin, err = filepath.Abs(p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(itBin); err != nil {
			return fmt.Errorf("SKILLBOX_BIN: %w", err)
		}
		return nil
	}
	itBuildDir, err = os.MkdirTemp("", "skillbox-it-bin-")
	if err != nil {
		return err
	}
	itBin = filepath.Join(itBuildDir, "skillbox")
	cmd := exec.Command("go", "build", "-o", itBin, ".")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/skillbox: %w", err)
	}
	return nil
}

func haveBinary(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

var (
	daemonImagesOnce sync.Once
	daemonImagesSkip string
)

// needDaemon skips unless the daemon tests can run here: root, runsc, and
// the python and shell images built in itImages.
func needDaemon(t *testing.T) {
	t.Helper()
	if itSkip != "" {
		runtimetest.SkipUnlessRequired(t, "%s", itSkip)
	}
	if !haveBinary(runtime.PinnedRunscPath()) {
		runtimetest.SkipUnlessRequired(t, "the pinned runsc (gVisor) is not installed: run hack/install-runsc.sh to run the daemon integration tests")
	}
	daemonImagesOnce.Do(func() {
		out, err := exec.Command(itBin, "images", "list", "--json", "--dir", itImages).Output()
		if err != nil {
			daemonImagesSkip = fmt.Sprintf("cannot list the images in %s (%v): build them with `skillbox images build python shell`", itImages, err)
			return
		}
		var list []struct {
			Name  string `json:"name"`
			Built bool   `json:"built"`
		}
		if err := json.Unmarshal(out, &list); err != nil {
			daemonImagesSkip = fmt.Sprintf("cannot read `skillbox images list --json` (%v)", err)
			return
		}
		built := map[string]bool{}
		for _, e := range list {
			built[e.Name] = e.Built
		}
		var missing []string
		for _, n := range []string{"python", "shell"} {
			if !built[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			daemonImagesSkip = fmt.Sprintf("images %s are not built in %s: run `skillbox images build %s` (or set SKILLBOX_IMAGES)",
				strings.Join(missing, ", "), itImages, strings.Join(missing, " "))
		}
	})
	if daemonImagesSkip != "" {
		runtimetest.SkipUnlessRequired(t, "%s", daemonImagesSkip)
	}
}

// ---- a daemon under test ----

const itPolicy = `
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "skills.run_code"]
  env    = ["GREETING_STYLE", "SECRET_TOKEN", "MODE"]
}
policy "needs-approval" {
  skills  = ["guarded-*"]
  confirm = ["skills.run_script", "skills.run_code"]
}
policy "no-code" {
  skills = ["nocode-*"]
  deny   = ["skills.run_code"]
}
policy "sessions" {
  skills    = ["sess-*"]
  isolation = "session"
}
`

type itDaemon struct {
	t        *testing.T
	base     string // 0755, so a second uid can reach the socket
	cfgPath  string
	socket   string
	auditDir string
	stateDir string
	runscDir string
	logPath  string
	grace    string // serve --grace (default 20s)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
}

// newItDaemon writes the config (plus temp dirs, the image dir and
// the given extra skill roots) and returns a daemon that is not yet started.
func newItDaemon(t *testing.T, extraRoots ...string) *itDaemon {
	t.Helper()
	// The warm pool is off: these tests count and name the sandboxes of
	// their runs (TestDaemonWarmPool turns it on).
	return newItDaemonPool(t, 0, extraRoots...)
}

// newItDaemonPool is newItDaemon with a warm pool of perKey sandboxes per
// skill.
func newItDaemonPool(t *testing.T, perKey int, extraRoots ...string) *itDaemon {
	t.Helper()
	base, err := os.MkdirTemp("", "sbit-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	d := &itDaemon{
		t: t, base: base,
		cfgPath:  filepath.Join(base, "skillbox.hcl"),
		socket:   filepath.Join(base, "run", "skillbox.sock"),
		auditDir: filepath.Join(base, "audit"),
		stateDir: filepath.Join(base, "state"),
		runscDir: filepath.Join(base, "runsc"),
		logPath:  filepath.Join(base, "serve.log"),
	}
	roots := []string{filepath.Join(itRepo, "examples", "skills")}
	roots = append(roots, extraRoots...)
	quoted := make([]string, len(roots))
	for i, r := range roots {
		quoted[i] = fmt.Sprintf("%q", r)
	}
	cfg := fmt.Sprintf(`
daemon {
  socket      = %q
  socket_mode = "0666"
  state_dir   = %q
  audit_dir   = %q
  approvers   = ["root"]
  # Generous for a busy two-core machine: 8 concurrent runs queue for 4 slots.
  run_queue_timeout = "5m"
  workspace_quota   = "64MiB"
}
skills { roots = [%s] }
images { dir = %q }
runtime "runsc" { state_dir = %q }
pool { per_key = %d }
`, d.socket, d.stateDir, d.auditDir, strings.Join(quoted, ", "), itImages, d.runscDir, perKey) + itPolicy
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.stop()
		d.removeLeftoverContainers()
		unmountNullNetns(d.runscDir)
		if t.Failed() {
			if b, err := os.ReadFile(d.logPath); err == nil {
				t.Logf("daemon log (%s):\n%s", d.logPath, tailLines(string(b), 60))
			}
			t.Logf("kept %s for inspection", base)
			return
		}
		os.RemoveAll(base)
	})
	return d
}

// start runs `skillbox serve` and waits until the socket answers.
func (d *itDaemon) start() {
	d.t.Helper()
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	grace := d.grace
	if grace == "" {
		grace = "20s"
	}
	cmd := exec.Command(itBin, "serve", "--config", d.cfgPath, "--grace", grace)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), EnvLogLevel+"=debug")
	if err := cmd.Start(); err != nil {
		logf.Close()
		d.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()

	waitfor.True(d.t, "skillbox serve to open "+d.socket, 3*time.Minute, func() bool {
		select {
		case err := <-done:
			done <- err
			b, _ := os.ReadFile(d.logPath)
			d.t.Fatalf("skillbox serve exited before serving (%v):\n%s", err, tailLines(string(b), 40))
		default:
		}
		c, err := net.Dial("unix", d.socket)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// stop sends SIGTERM and waits for a clean exit.
func (d *itDaemon) stop() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			d.t.Errorf("skillbox serve exited with %v after SIGTERM", err)
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		d.t.Errorf("skillbox serve did not stop within 2 minutes of SIGTERM")
	}
}

// kill9 kills the daemon the way a crash would.
func (d *itDaemon) kill9() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		d.t.Fatal("kill9: daemon not running")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

func (d *itDaemon) client() *client.Client {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, d.socket)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { c.Close() })
	return c
}

// containers lists the sandboxes runsc knows in this daemon's state dir.
func (d *itDaemon) containers() []string {
	out, err := exec.Command(runtime.PinnedRunscPath(), "--root", d.runscDir, "list", "-quiet").Output()
	if err != nil {
		return nil // no state dir yet: nothing there
	}
	var ids []string
	for _, l := range strings.Fields(string(out)) {
		ids = append(ids, l)
	}
	return ids
}

func (d *itDaemon) removeLeftoverContainers() {
	for _, id := range d.containers() {
		exec.Command(runtime.PinnedRunscPath(), "--root", d.runscDir, "delete", "-force", id).Run()
	}
}

// records reads the audit log back.
func (d *itDaemon) records() []*audit.Record {
	d.t.Helper()
	var out []*audit.Record
	if err := audit.Read(d.auditDir, func(r *audit.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		d.t.Fatalf("reading the audit log: %v", err)
	}
	return out
}

// verify runs `skillbox audit verify --dir dir`.
func verify(t *testing.T, dir string) (string, int) {
	t.Helper()
	cmd := exec.Command(itBin, "audit", "verify", "--dir", dir)
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), itCallLimit)
	t.Cleanup(cancel)
	return ctx
}

func wantKind(t *testing.T, what string, err error, kind string) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: want a %s error, got %v", what, kind, err)
	}
	if e.Kind != kind {
		t.Fatalf("%s: want kind %s, got %s: %s", what, kind, e.Kind, e.Message)
	}
	return e
}

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---- the walk through the tool calls ----

func TestDaemonWalkthrough(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t)
	d.start()
	c := d.client()
	ctx := ctxT(t)

	sid := must[string](t, "sessions.create")(c.NewSession(ctx))

	list := must[[]api.SkillInfo](t, "skills.list")(c.ListSkills(ctx, api.Peer{}, api.ListSkillsParams{SessionID: sid}))
	names := map[string]api.SkillInfo{}
	for _, s := range list {
		names[s.Name] = s
	}
	for _, n := range []string{"hello-python", "shell-tools", "node-hello", "guarded-deploy"} {
		if s, ok := names[n]; !ok || !strings.HasPrefix(s.Digest, "sha256:") || !strings.HasSuffix(s.Location, n+"/SKILL.md") {
			t.Errorf("skills.list: %s missing or incomplete: %+v", n, s)
		}
	}

	_, err := c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Path: "SKILL.md"})
	wantKind(t, "read before load", err, api.KindInvalidParams)

	lr := must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"hello-python"}}))
	if len(lr.ActiveSkills) != 1 || lr.ActiveSkills[0].Digest != names["hello-python"].Digest || lr.ActiveSkills[0].RootDir == "" {
		t.Fatalf("load receipt: %+v", lr)
	}

	rr := must[*api.ReadResult](t, "skills.read")(c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Path: "references/usage.md"}))
	if rr.Skill != "hello-python" || rr.Size == 0 || rr.Content == "" || len(rr.SHA256) != 64 {
		t.Errorf("read: %+v", rr)
	}
	for _, p := range []string{"../shell-tools/SKILL.md", "/etc/passwd", "references/../../../../../etc/shadow"} {
		_, err := c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Path: p})
		wantKind(t, "escape read "+p, err, api.KindInvalidParams)
	}

	res := must[*api.RunScriptResult](t, "run_script")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{
		RunInputs: api.RunInputs{SessionID: sid, Args: []string{"a b", "c"}, Env: map[string]string{"GREETING_STYLE": "plain"}},
		Path:      "scripts/hello.py",
	}))
	if res.ExitCode != 0 || res.Reason != "exit" || res.Runtime != "runsc" || res.Image != "python" || !strings.HasPrefix(res.ImageDigest, "sha256:") ||
		!strings.Contains(res.Stdout, "Hello from Python 3") || !strings.Contains(res.Stdout, "1: a b") || !strings.Contains(res.Stdout, "2: c") {
		t.Fatalf("run in gVisor: %+v", res)
	}
	t.Logf("hello.py in gVisor: %d ms, stdout %q", res.DurationMS, res.Stdout)

	ins := must[*api.InstructionsResult](t, "instructions")(c.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	for _, want := range []string{"<available_skills>", "</available_skills>", "<active_skills>", "</active_skills>",
		"# Hello, Python", "scripts/hello.py", "guarded-deploy", "skills.load"} {
		if !strings.Contains(ins.Instructions, want) {
			t.Errorf("instructions lack %q", want)
		}
	}

	// The guarded skill needs an approver; root is one.
	must[*api.LoadResult](t, "load guarded")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"guarded-deploy"}, Mode: api.LoadAdd}))
	deploy := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"web", "staging", "1.2.3"}}, Skill: "guarded-deploy", Path: "scripts/deploy.sh"}
	_, err = c.RunScript(ctx, api.Peer{}, deploy)
	ce := wantKind(t, "guarded run", err, api.KindConfirmationRequired)
	conf, ok := ce.ConfirmationRequired()
	if !ok || !strings.Contains(conf.Rule, "needs-approval") {
		t.Fatalf("confirmation data: %+v", ce.Data)
	}
	pending := must[*api.ListConfirmationsResult](t, "confirmations.list")(c.ListConfirmations(ctx, api.Peer{}, api.ListConfirmationsParams{State: "pending"})).Confirmations
	if len(pending) != 1 || pending[0].ID != conf.ConfirmationID {
		t.Fatalf("pending confirmations: %+v", pending)
	}
	approved := must[*api.Confirmation](t, "approve")(c.ApproveConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: conf.ConfirmationID}))
	if approved.State != api.ConfirmationApproved {
		t.Fatalf("approve: %+v", approved)
	}
	deploy.ConfirmationID = conf.ConfirmationID
	res = must[*api.RunScriptResult](t, "approved run")(c.RunScript(ctx, api.Peer{}, deploy))
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "deployed web@1.2.3 to staging (simulated)") {
		t.Fatalf("approved run: %+v", res)
	}
	other := deploy
	other.Args = []string{"web", "production", "1.2.3"}
	_, err = c.RunScript(ctx, api.Peer{}, other)
	wantKind(t, "same confirmation, other args", err, api.KindInvalidParams)
	_, err = c.RunScript(ctx, api.Peer{}, deploy)
	wantKind(t, "same confirmation again", err, api.KindInvalidParams)

	ur := must[*api.LoadResult](t, "unload")(c.UnloadSkills(ctx, api.Peer{}, api.UnloadParams{SessionID: sid, Names: []string{"guarded-deploy"}}))
	if len(ur.ActiveSkills) != 1 || ur.ActiveSkills[0].Name != "hello-python" {
		t.Fatalf("unload: %+v", ur)
	}

	// Protocol errors on one raw connection, which keeps working.
	nc, err := net.Dial("unix", d.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	send := func(line string) map[string]any {
		t.Helper()
		nc.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(nc, line+"\n"); err != nil {
			t.Fatal(err)
		}
		b, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading the answer to %s: %v", line, err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("answer %q: %v", b, err)
		}
		return m
	}
	errCode := func(m map[string]any) int {
		e, _ := m["error"].(map[string]any)
		f, _ := e["code"].(float64)
		return int(f)
	}
	if m := send(`{"jsonrpc":"2.0","id":1,"method":"skills.list",`); errCode(m) != -32700 {
		t.Errorf("malformed JSON: %v", m)
	}
	if m := send(`{"jsonrpc":"2.0","id":2,"method":"skills.frobnicate","params":{}}`); errCode(m) != -32601 {
		t.Errorf("unknown method: %v", m)
	}
	if m := send(`{"jsonrpc":"2.0","id":3,"method":"sessions.instructions","params":{"session_id":"` + sid + `"}}`); m["error"] != nil || m["result"] == nil {
		t.Errorf("connection did not keep working: %v", m)
	}

	// Eight sessions at once, each running a script in its own sandbox.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cl, err := client.Dial(ctx, d.socket)
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			s, err := cl.NewSession(ctx)
			if err != nil {
				errs <- fmt.Errorf("session %d: %w", i, err)
				return
			}
			if _, err := cl.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: s, Names: []string{"hello-python"}}); err != nil {
				errs <- fmt.Errorf("session %d: load: %w", i, err)
				return
			}
			r, err := cl.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: s, Args: []string{fmt.Sprintf("run-%d", i)}}, Path: "scripts/hello.py"})
			if err != nil {
				errs <- fmt.Errorf("session %d: run: %w", i, err)
				return
			}
			if r.ExitCode != 0 || !strings.Contains(r.Stdout, fmt.Sprintf("1: run-%d", i)) {
				errs <- fmt.Errorf("session %d: result %+v", i, r)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Restart: the first session still has its skill.
	d.stop()
	d.start()
	c2 := d.client()
	ins = must[*api.InstructionsResult](t, "instructions after restart")(c2.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	if !strings.Contains(ins.ActiveSkills, `name="hello-python"`) || strings.Contains(ins.ActiveSkills, `name="guarded-deploy"`) {
		t.Errorf("after restart the session's active skills are:\n%s", ins.ActiveSkills)
	}
	// And it still runs.
	res = must[*api.RunScriptResult](t, "run after restart")(c2.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/hello.py"}))
	if res.ExitCode != 0 {
		t.Errorf("run after restart: %+v", res)
	}
	d.stop()

	if out, code := verify(t, d.auditDir); code != 0 || !strings.Contains(out, "intact") {
		t.Errorf("audit verify after the walk-through: exit %d\n%s", code, out)
	}
	recs := d.records()
	counts := map[string]int{}
	for _, r := range recs {
		counts[r.Event]++
	}
	t.Logf("audit log: %d records: %v", len(recs), counts)
	for ev, min := range map[string]int{
		audit.EventDaemonStart: 2, audit.EventDaemonStop: 2, audit.EventSessionCreate: 9, audit.EventSkillLoad: 10,
		audit.EventSkillUnload: 1, audit.EventSkillRead: 4, audit.EventRunStart: 11, audit.EventRunEnd: 11,
		audit.EventConfirmRequest: 1, audit.EventConfirmApprove: 1, audit.EventConfirmUse: 3, audit.EventDecision: 14,
		// read before load, the malformed line, the unknown method
		audit.EventCallRefused: 3,
	} {
		if counts[ev] < min {
			t.Errorf("audit log has %d %s records, want at least %d", counts[ev], ev, min)
		}
	}
}

// Every refused call is in the log, the transport's refusals included, and
// only once: the refusals the handlers record in detail get no call.refused
// record of their own.
func TestDaemonRefusedCallsInAuditLog(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t)
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	_, err := c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Path: "SKILL.md"})
	wantKind(t, "read before load", err, api.KindInvalidParams)
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"hello-python"}}))
	_, err = c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Path: "../shell-tools/SKILL.md"})
	wantKind(t, "escaping read", err, api.KindInvalidParams)

	nc, err := net.Dial("unix", d.socket)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	for _, line := range []string{
		"GET / HTTP/1.1",
		`{"jsonrpc":"2.0","id":"x1","method":"skills.frobnicate","params":{"token":"hunter2"}}`,
		`{"jsonrpc":"2.0","id":"x2","method":"sessions.create","params":{"token":"hunter2"}}`,
	} {
		nc.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(nc, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := br.ReadBytes('\n'); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	d.stop()

	if out, code := verify(t, d.auditDir); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	raw, err := os.ReadFile(filepath.Join(d.auditDir, "audit-000001.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("hunter2")) {
		t.Error("params reached the audit log")
	}
	var refused []*audit.Record
	for _, r := range d.records() {
		if r.Event == audit.EventCallRefused {
			refused = append(refused, r)
		}
	}
	got := map[string]*audit.Record{}
	for _, r := range refused {
		got[r.Method+" "+r.Detail["code"]] = r
		if r.Peer == nil || r.Peer.UID != uint32(os.Getuid()) || r.Peer.PID != int32(os.Getpid()) || r.Error == "" {
			t.Errorf("incomplete call.refused record %+v", r)
		}
	}
	for _, k := range []string{"skills.read -32602", " -32700", "skills.frobnicate -32601", "sessions.create -32602"} {
		if got[k] == nil {
			t.Errorf("no call.refused record for %q; have %v", k, got)
		}
	}
	if len(refused) != 4 {
		t.Errorf("%d call.refused records, want 4 (the escaping read is a skills.read record)", len(refused))
	}
	if r := got["skills.read -32602"]; r != nil && r.SessionID != sid {
		t.Errorf("read before load: session %q", r.SessionID)
	}
	if r := got[" -32700"]; r != nil && r.Detail["line_start"] != `"GET / HTTP/1.1"` {
		t.Errorf("parse error record %+v", r.Detail)
	}
}

// SIGTERM lets runs finish and saves the sessions' last use; a second
// signal during the grace period kills the runs at once, and the daemon
// still writes daemon.stop and removes its socket.
func TestDaemonShutdownSignals(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t, extraSkill(t, "sleeper", "scripts/sleep.sh", "echo sleeping\nsleep 600\n"))
	d.grace = "30m" // far longer than the test may take: only a second signal ends it early
	// Runs may last as long too (the default limit is 30s).
	f, err := os.OpenFile(d.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("limits {\n  timeout = \"30m\"\n}\n")
	f.Close()
	d.start()
	c := d.client()
	ctx := ctxT(t)

	// A clean stop: the sweepers' last sweep saves the session's last use
	// before the state database is closed.
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	time.Sleep(20 * time.Millisecond) // its last use is later than its creation
	must[*api.InstructionsResult](t, "instructions")(c.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	d.stop()
	st, err := store.OpenStateDB(d.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	list, err := store.NewSessionStore(st, store.SessionOptions{}).List(uint32(os.Getuid()))
	st.Close()
	if err != nil || len(list) != 1 || list[0].ID != sid || !list[0].LastUsed.After(list[0].Created) {
		t.Fatalf("after a clean stop the session's last use was not saved: %+v %v", list, err)
	}

	// A run in flight, then two signals.
	d.start()
	c = d.client()
	sid = must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"sleeper"}}))
	runErr := make(chan error, 1)
	go func() {
		_, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, TimeoutMS: 20 * 60 * 1000}, Path: "scripts/sleep.sh"})
		runErr <- err
	}()
	var runID string
	waitfor.NoError(t, "the run to start", 3*time.Minute, func() error {
		audit.Read(d.auditDir, func(r *audit.Record) error {
			if r.Event == audit.EventRunStart && r.SessionID == sid {
				runID = r.Run.RunID
			}
			return nil
		})
		if runID == "" || len(d.containers()) == 0 {
			return fmt.Errorf("run %q", runID)
		}
		return nil
	})
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.cmd = nil
	d.mu.Unlock()
	cmd.Process.Signal(syscall.SIGTERM)
	// The socket goes at once; the run goes on.
	waitfor.True(t, "the socket to go after SIGTERM", 2*time.Minute, func() bool {
		_, err := os.Lstat(d.socket)
		return errors.Is(err, os.ErrNotExist)
	})
	select {
	case err := <-done:
		t.Fatalf("the daemon exited on the first SIGTERM with a run in flight and a 30m grace (%v)", err)
	case err := <-runErr:
		t.Fatalf("the run ended on the first SIGTERM: %v", err)
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("forced stop: serve exited with %v", err)
		}
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatal("the daemon did not stop within 3 minutes of the second SIGTERM")
	}
	if err := <-runErr; err == nil {
		t.Error("the run succeeded although the daemon was stopped by force")
	}
	if _, err := os.Lstat(d.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if cs := d.containers(); len(cs) != 0 {
		t.Errorf("sandboxes left behind: %v", cs)
	}
	if out, code := verify(t, d.auditDir); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	var ended bool
	var stop *audit.Record
	for _, r := range d.records() {
		if r.Event == audit.EventRunEnd && r.Run != nil && r.Run.RunID == runID {
			ended = true
		}
		if r.Event == audit.EventDaemonStop {
			stop = r
		}
	}
	if !ended {
		t.Error("the killed run has no run.end record")
	}
	if stop == nil || !strings.Contains(stop.Outcome, "forced") {
		t.Errorf("last daemon.stop record %+v", stop)
	}
}

// ---- peer credentials with a real second uid ----

func TestDaemonPeerCredentialsSecondUID(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t)
	d.start()
	c := d.client()
	ctx := ctxT(t)

	asNobody := func(method, params string) (string, string, int) { return d.callAsNobody(t, method, params) }

	// Root's session, with a skill loaded and a confirmation pending.
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"guarded-deploy"}}))
	_, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"api", "staging"}}, Path: "scripts/deploy.sh"})
	conf, _ := wantKind(t, "guarded run", err, api.KindConfirmationRequired).ConfirmationRequired()

	// nobody cannot see or use root's session ...
	for _, tc := range []struct{ method, params string }{
		{"sessions.instructions", `{"session_id":"` + sid + `"}`},
		{"skills.read", `{"session_id":"` + sid + `","path":"SKILL.md"}`},
		{"skills.run_script", `{"session_id":"` + sid + `","path":"scripts/deploy.sh","args":["api","staging"],"confirmation_id":"` + conf.ConfirmationID + `"}`},
		{"sessions.close", `{"session_id":"` + sid + `"}`},
	} {
		_, stderr, code := asNobody(tc.method, tc.params)
		if code != 1 || !strings.Contains(stderr, "error (not_found)") {
			t.Errorf("nobody %s on root's session: exit %d, stderr %q", tc.method, code, stderr)
		}
	}
	// ... nor its confirmations, and cannot approve.
	out, stderr, code := asNobody("confirmations.list", "")
	if code != 0 || strings.Contains(out, conf.ConfirmationID) {
		t.Errorf("nobody lists confirmations: exit %d, %s %s", code, out, stderr)
	}
	_, stderr, code = asNobody("confirmations.approve", `{"id":"`+conf.ConfirmationID+`"}`)
	if code != 1 || !strings.Contains(stderr, "error (denied)") || !strings.Contains(stderr, "65534") {
		t.Errorf("nobody approves: exit %d, stderr %q", code, stderr)
	}

	// nobody's own session is invisible to root.
	out, stderr, code = asNobody("sessions.create", "")
	if code != 0 {
		t.Fatalf("nobody creates a session: exit %d %s", code, stderr)
	}
	var created api.CreateSessionResult
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.SessionID == "" {
		t.Fatalf("sessions.create output %q: %v", out, err)
	}
	_, err = c.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: created.SessionID})
	wantKind(t, "root reads nobody's session", err, api.KindNotFound)
	_, stderr, code = asNobody("sessions.instructions", `{"session_id":"`+created.SessionID+`"}`)
	if code != 0 {
		t.Errorf("nobody reads its own session: exit %d %s", code, stderr)
	}

	// Root's confirmation was not touched.
	list := must[*api.ListConfirmationsResult](t, "list")(c.ListConfirmations(ctx, api.Peer{}, api.ListConfirmationsParams{})).Confirmations
	if len(list) != 1 || list[0].State != api.ConfirmationPending {
		t.Errorf("root's confirmation after nobody's attempts: %+v", list)
	}
	d.stop()

	// The audit log names who did what.
	var nobodyCreate, refusedApprove bool
	for _, r := range d.records() {
		if r.Peer == nil || r.Peer.UID != 65534 {
			continue
		}
		if r.Event == audit.EventSessionCreate && r.Peer.GID == 65534 && r.Peer.PID > 0 && r.Peer.Process == "skillbox" {
			nobodyCreate = true
		}
		if r.Event == audit.EventConfirmApprove && r.Outcome == audit.OutcomeRefused {
			refusedApprove = true
		}
	}
	if !nobodyCreate || !refusedApprove {
		t.Errorf("audit: nobody's session.create recorded %v, refused approval recorded %v", nobodyCreate, refusedApprove)
	}
}

// unmountNullNetns removes the empty network namespace a current runsc
// keeps mounted in its state dir (stateDir), as often as it is mounted
// there: once more for each runsc that found it missing while another was
// making it.
func unmountNullNetns(stateDir string) {
	for i := 0; i < 16 && unix.Unmount(filepath.Join(stateDir, "null-netns"), unix.MNT_DETACH) == nil; i++ {
	}
}

// binaryForUIDs returns a copy of the binary under test in the daemon's
// 0755 base dir, where other uids can run it (made once).
func (d *itDaemon) binaryForUIDs(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(d.base, "skillbox")
	if _, err := os.Stat(bin); err != nil {
		data, err := os.ReadFile(itBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// callAsNobody makes one call with `skillbox call` as uid 65534 (a copy of
// the binary in the daemon's 0755 base dir, which nobody can reach) and
// returns its stdout, stderr and exit code.
func (d *itDaemon) callAsNobody(t *testing.T, method, params string) (string, string, int) {
	t.Helper()
	args := []string{"call", "--socket", d.socket, "--timeout", "2m", method}
	if params != "" {
		args = append(args, params)
	}
	return d.runAsUID(t, 65534, nil, args...)
}

// runAsUID runs the binary under test (binaryForUIDs) as uid (gid the
// same) with args and stdin, and returns its stdout, stderr and exit code.
func (d *itDaemon) runAsUID(t *testing.T, uid uint32, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(d.binaryForUIDs(t), args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// waitRunStarted waits until a run of session sid is audited as started
// and ready(runID) holds, and returns the run's id; a run that ends first
// (runErr) fails the test.
func (d *itDaemon) waitRunStarted(t *testing.T, sid string, runErr <-chan error, ready func(runID string) bool) string {
	t.Helper()
	var runID string
	waitfor.NoError(t, "the run to start", 3*time.Minute, func() error {
		select {
		case err := <-runErr:
			t.Fatalf("the run ended early: %v", err)
		default:
		}
		audit.Read(d.auditDir, func(r *audit.Record) error {
			if r.Event == audit.EventRunStart && r.SessionID == sid {
				runID = r.Run.RunID
			}
			return nil
		})
		if runID == "" || !ready(runID) {
			return fmt.Errorf("run %q", runID)
		}
		return nil
	})
	return runID
}

// ---- what the log holds, and that tampering is caught ----

// extraSkill writes a one-script skill into a new root and returns the root.
func extraSkill(t *testing.T, name, script, body string) string {
	t.Helper()
	root, err := os.MkdirTemp("", "sbit-skills-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o755)
	t.Cleanup(func() { os.RemoveAll(root) })
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	md := fmt.Sprintf("---\nname: %s\ndescription: Test skill %s for the daemon integration tests.\n---\n# %s\n\nRun %s.\n", name, name, name, script)
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, script), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestDaemonAuditRecordsAndTamper(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t, extraSkill(t, "reporter", "scripts/report.sh", "mkdir -p outputs\nprintf 'total: 42\\n' > outputs/report.txt\necho wrote report\n"))
	d.start()
	c := d.client()
	ctx := ctxT(t)

	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	lr := must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"shell-tools"}}))
	digest := lr.ActiveSkills[0].Digest
	must[*api.ReadResult](t, "read")(c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Path: "scripts/count.sh"}))
	_, err := c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Path: "../hello-python/SKILL.md"})
	wantKind(t, "refused read", err, api.KindInvalidParams)
	res := must[*api.RunScriptResult](t, "run")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{
		RunInputs: api.RunInputs{SessionID: sid, Args: []string{"in.txt"}, Env: map[string]string{"SECRET_TOKEN": "hunter2", "MODE": "x"}, Files: []api.File{api.NewFile("in.txt", []byte("one two\nthree\n"))}},
		Path:      "scripts/count.sh",
	}))
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "in.txt") {
		t.Fatalf("count.sh: %+v", res)
	}
	// A second session whose script leaves an output file.
	sid2 := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load reporter")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid2, Names: []string{"reporter"}}))
	rep := must[*api.RunScriptResult](t, "report.sh")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid2}, Path: "scripts/report.sh"}))
	if rep.ExitCode != 0 || len(rep.Outputs) != 1 || rep.Outputs[0].Path != "outputs/report.txt" {
		t.Fatalf("report.sh: %+v", rep)
	}
	if data, err := rep.Outputs[0].Data(); err != nil || string(data) != "total: 42\n" {
		t.Errorf("output content %q, %v", data, err)
	}
	d.stop()

	raw, err := os.ReadFile(filepath.Join(d.auditDir, "audit-000001.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("hunter2")) {
		t.Error("an env value reached the audit log")
	}
	recs := d.records()
	find := func(event string, ok func(*audit.Record) bool) *audit.Record {
		for _, r := range recs {
			if r.Event == event && (ok == nil || ok(r)) {
				return r
			}
		}
		t.Fatalf("no %s record", event)
		return nil
	}
	me := uint32(os.Getuid())
	peerOK := func(r *audit.Record) {
		t.Helper()
		if r.Peer == nil || r.Peer.UID != me || r.Peer.GID != uint32(os.Getgid()) || r.Peer.PID != int32(os.Getpid()) || r.Peer.Process == "" {
			t.Errorf("%s: peer %+v", r.Event, r.Peer)
		}
		if r.SessionID != sid {
			t.Errorf("%s: session %q", r.Event, r.SessionID)
		}
	}
	load := find(audit.EventSkillLoad, nil)
	peerOK(load)
	if load.Skill == nil || load.Skill.Name != "shell-tools" || load.Skill.Digest != digest {
		t.Errorf("load record skill %+v", load.Skill)
	}
	read := find(audit.EventSkillRead, func(r *audit.Record) bool { return r.Outcome == audit.OutcomeOK })
	peerOK(read)
	if read.Read == nil || read.Read.Path != "scripts/count.sh" || len(read.Read.SHA256) != 64 || read.Read.Bytes == 0 || read.Skill.Digest != digest {
		t.Errorf("read record %+v", read.Read)
	}
	refused := find(audit.EventSkillRead, func(r *audit.Record) bool { return r.Outcome == audit.OutcomeRefused })
	peerOK(refused)
	if refused.Read == nil || refused.Read.Path != "../hello-python/SKILL.md" || refused.Error == "" {
		t.Errorf("refused read record %+v %q", refused.Read, refused.Error)
	}
	repEnd := find(audit.EventRunEnd, func(r *audit.Record) bool { return r.SessionID == sid2 })
	if o := repEnd.Run.Outputs; len(o) != 1 || o[0].Path != "outputs/report.txt" || o[0].Size != 10 || o[0].SHA256 != rep.Outputs[0].SHA256 {
		t.Errorf("outputs in the run.end record: %+v", o)
	}
	start := find(audit.EventRunStart, func(r *audit.Record) bool { return r.SessionID == sid })
	end := find(audit.EventRunEnd, func(r *audit.Record) bool { return r.SessionID == sid })
	for _, r := range []*audit.Record{start, end} {
		peerOK(r)
		ri := r.Run
		if r.Skill == nil || r.Skill.Name != "shell-tools" || r.Skill.Digest != digest {
			t.Errorf("%s: skill %+v", r.Event, r.Skill)
		}
		if ri == nil || ri.RunID != res.RunID || ri.Script != "scripts/count.sh" || len(ri.ScriptSHA256) != 64 ||
			strings.Join(ri.Args, " ") != "in.txt" || strings.Join(ri.EnvNames, ",") != "MODE,SECRET_TOKEN" ||
			ri.Runtime != "runsc" || !strings.Contains(ri.RuntimeVersion, "runsc") || ri.Image != "shell" || ri.ImageDigest != res.ImageDigest ||
			ri.Limits.Timeout <= 0 || ri.Limits.MemoryBytes <= 0 || ri.Limits.Pids <= 0 || ri.Network || len(ri.Inputs) != 1 {
			t.Errorf("%s: run info %+v", r.Event, ri)
		}
	}
	if start.Seq >= end.Seq || start.Run.ExitCode != nil {
		t.Errorf("run.start (seq %d) must precede run.end (seq %d) and hold no result", start.Seq, end.Seq)
	}
	e := end.Run
	if e.ExitCode == nil || *e.ExitCode != 0 || e.Reason != "exit" || e.StdoutBytes != int64(len(res.Stdout)) || len(e.StdoutSHA256) != 64 ||
		len(e.StderrSHA256) != 64 || e.DurationMS <= 0 || end.Outcome != "exit" {
		t.Errorf("run.end result %+v", e)
	}

	// The untouched log verifies; each kind of tampering is caught, naming
	// the seq.
	if out, code := verify(t, d.auditDir); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(raw), "\n"), "\n")
	for i := range lines {
		if !strings.HasSuffix(lines[i], "\n") {
			lines[i] += "\n"
		}
	}
	mid := len(lines) / 2
	seqOf := func(line string) uint64 {
		var r struct{ Seq uint64 }
		json.Unmarshal([]byte(line), &r)
		return r.Seq
	}
	midSeq := seqOf(lines[mid])
	tamper := func(name string, edit func([]string) []string, wantSeqs ...uint64) {
		t.Helper()
		dir := filepath.Join(d.base, "tamper-"+name)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		cp := edit(append([]string(nil), lines...))
		if err := os.WriteFile(filepath.Join(dir, "audit-000001.jsonl"), []byte(strings.Join(cp, "")), 0o640); err != nil {
			t.Fatal(err)
		}
		out, code := verify(t, dir)
		if code == 0 {
			t.Errorf("%s: verify accepted a tampered log:\n%s", name, out)
			return
		}
		for _, s := range wantSeqs {
			if strings.Contains(out, fmt.Sprintf("first bad seq %d:", s)) {
				return
			}
		}
		t.Errorf("%s: verify does not name seq %v:\n%s", name, wantSeqs, out)
	}
	tamper("byte", func(ls []string) []string {
		b := []byte(ls[mid])
		i := bytes.Index(b, []byte(`"event":"`)) + len(`"event":"`)
		b[i] ^= 0x20 // one letter changes case
		ls[mid] = string(b)
		return ls
	}, midSeq)
	tamper("drop", func(ls []string) []string {
		return append(ls[:mid], ls[mid+1:]...)
	}, midSeq)
	tamper("swap", func(ls []string) []string {
		ls[mid], ls[mid+1] = ls[mid+1], ls[mid]
		return ls
	}, midSeq, midSeq+1)
}

// ---- fail closed when the log cannot be written ----

// auditOnTmpfs mounts a tmpfs of size on the daemon's audit dir (the test
// is skipped if it cannot), unmounted after the daemon stops.
func (d *itDaemon) auditOnTmpfs(t *testing.T, size string) {
	t.Helper()
	if err := os.MkdirAll(d.auditDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", d.auditDir, "tmpfs", 0, "size="+size+",mode=0750"); err != nil {
		t.Skipf("cannot mount a tmpfs for the audit dir: %v", err)
	}
	// Cleanups run last-registered first: this one stops the daemon before
	// unmounting, then newItDaemon's removes the directories.
	t.Cleanup(func() {
		d.stop()
		if err := unix.Unmount(d.auditDir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", d.auditDir, err)
		}
	})
}

func TestDaemonAuditFullFailsClosed(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t)
	// This is the log that cannot be written at all; the free-space
	// watermark (audit.min_free, far above this tmpfs) is off here and
	// tested in sandbox/core/service.
	cfg, err := os.OpenFile(d.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(cfg, "audit { min_free = 0 }")
	cfg.Close()
	d.auditOnTmpfs(t, "256k")
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"hello-python"}}))
	must[*api.RunScriptResult](t, "run before the disk fills")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/hello.py"}))

	// Fill the file system, then write small audited calls until the log
	// hits the wall (the last page of its file may still have had room).
	filler := filepath.Join(d.auditDir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the tmpfs: %v", err)
			}
			break
		}
	}
	f.Close()
	full := false
	for i := 0; i < 200 && !full; i++ {
		_, err := c.CheckTool(ctx, api.Peer{}, api.CheckToolParams{SessionID: sid, Tool: "skills.read"})
		if err != nil {
			wantKind(t, "tools.check on a full disk", err, api.KindUnavailable)
			full = true
		}
	}
	if !full {
		t.Fatal("200 audited calls succeeded on a full tmpfs")
	}

	_, err = c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"must-not-run"}}, Path: "scripts/hello.py"})
	e := wantKind(t, "run with a full audit log", err, api.KindUnavailable)
	if !strings.Contains(e.Message, "audit") || !strings.Contains(e.Message, "no space left") {
		t.Errorf("the refusal does not say why: %s", e.Message)
	}
	t.Logf("refused: %s", e.Message)

	// Space returns: the next run works, with no restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	res := must[*api.RunScriptResult](t, "run after space returned")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"after"}}, Path: "scripts/hello.py"}))
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "1: after") {
		t.Fatalf("run after recovery: %+v", res)
	}
	d.stop()

	if out, code := verify(t, d.auditDir); code != 0 {
		t.Errorf("verify after the outage: exit %d\n%s", code, out)
	}
	var resumed bool
	for _, r := range d.records() {
		if r.Event == audit.EventResumed {
			resumed = true
		}
		if r.Run != nil && strings.Join(r.Run.Args, " ") == "must-not-run" {
			t.Errorf("the refused run left a %s record", r.Event)
		}
	}
	if !resumed {
		t.Error("no audit.resumed record marks the outage")
	}
}

// ---- a crash in the middle of a run ----

func TestDaemonCrashMidRun(t *testing.T) {
	needDaemon(t)
	extra := extraSkill(t, "sleeper", "scripts/sleep.sh", "echo sleeping\nsleep 600\n")
	d := newItDaemon(t, extra)
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"sleeper"}}))

	runErr := make(chan error, 1)
	go func() {
		_, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, TimeoutMS: 300000}, Path: "scripts/sleep.sh"})
		runErr <- err
	}()
	// Wait until the run has been audited and its sandbox exists.
	runID := d.waitRunStarted(t, sid, runErr, func(string) bool { return len(d.containers()) > 0 })
	jobID := "skillbox-" + strings.TrimPrefix(runID, "run_")
	if cs := d.containers(); len(cs) != 1 || cs[0] != jobID {
		t.Fatalf("containers %v, want [%s]", cs, jobID)
	}

	d.kill9()
	if err := <-runErr; err == nil {
		t.Error("the client's run succeeded although the daemon was killed")
	}
	// A write torn by the crash: half a record at the end of the log.
	files, _ := filepath.Glob(filepath.Join(d.auditDir, "audit-*.jsonl"))
	sort.Strings(files)
	last := files[len(files)-1]
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":99999,"time":"2026-01-01T00:00:00Z","event":"run.e`)
	f.Close()

	d.start()
	// No sandbox is left behind: the sweep at start removes it.
	leftovers := func() []string {
		var out []string
		for _, id := range d.containers() {
			out = append(out, "container "+id)
		}
		paths := []string{filepath.Join("/run/skillbox/runs", jobID)}
		for _, parent := range []string{"/sys/fs/cgroup/skillbox", "/sys/fs/cgroup/memory/skillbox", "/sys/fs/cgroup/pids/skillbox", "/sys/fs/cgroup/cpu/skillbox"} {
			paths = append(paths, filepath.Join(parent, jobID))
		}
		for _, p := range paths {
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
		return out
	}
	if !waitfor.Within(2*time.Minute, func() bool { return len(leftovers()) == 0 }) {
		t.Errorf("left behind 2 minutes after the restart: %v", leftovers())
	}
	// The daemon works after the crash.
	c2 := d.client()
	ins := must[*api.InstructionsResult](t, "instructions after the crash")(c2.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	if !strings.Contains(ins.ActiveSkills, `name="sleeper"`) {
		t.Errorf("session lost its skill in the crash:\n%s", ins.ActiveSkills)
	}
	d.stop()

	if out, code := verify(t, d.auditDir); code != 0 {
		t.Fatalf("verify after the crash: exit %d\n%s", code, out)
	}
	var started, ended, recovered bool
	for _, r := range d.records() {
		switch {
		case r.Event == audit.EventRunStart && r.Run.RunID == runID:
			started = true
			if r.Run.Script != "scripts/sleep.sh" || r.Run.ScriptSHA256 == "" || r.Peer == nil {
				t.Errorf("interrupted run's start record: %+v", r.Run)
			}
		case r.Event == audit.EventRunEnd && r.Run.RunID == runID:
			ended = true
		case r.Event == audit.EventRecovered:
			recovered = true
			if r.Log == nil || r.Log.Dropped == nil || r.Log.Dropped.Bytes == 0 {
				t.Errorf("recovered record without what was dropped: %+v", r.Log)
			}
		}
	}
	if !started || ended || !recovered {
		t.Errorf("after the crash: run.start %v (want true), run.end %v (want false), audit.recovered %v (want true)", started, ended, recovered)
	}
}

// A client that hangs up in the middle of a run takes the run with it: the
// sandbox is killed and removed, and the run's end record says so.
func TestDaemonClientDisconnectKillsRun(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t, extraSkill(t, "sleeper", "scripts/sleep.sh", "echo sleeping\nsleep 600\n"))
	d.start()
	defer d.stop()
	ctx := ctxT(t)
	c := d.client()
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"sleeper"}}))

	runErr := make(chan error, 1)
	go func() {
		_, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, TimeoutMS: 300000}, Path: "scripts/sleep.sh"})
		runErr <- err
	}()
	waitfor.True(t, "the run's sandbox to appear", 3*time.Minute, func() bool {
		select {
		case err := <-runErr:
			t.Fatalf("the run ended early: %v", err)
		default:
		}
		return len(d.containers()) > 0
	})

	c.Close() // hang up mid-run
	<-runErr
	waitfor.NoError(t, "the sandbox to go after the client hung up", time.Minute, func() error {
		if cs := d.containers(); len(cs) > 0 {
			return fmt.Errorf("still there: %v", cs)
		}
		return nil
	})
	// The end record is written before the handler returns; allow the
	// daemon a moment to get there after the sandbox is gone.
	var end *audit.Record
	waitfor.True(t, "a run.end record after the client hung up", 30*time.Second, func() bool {
		for _, r := range d.records() {
			if r.Event == audit.EventRunEnd && r.SessionID == sid {
				end = r
			}
		}
		return end != nil
	})
	if end.Run == nil || end.Run.Reason != "killed" {
		t.Fatalf("run.end after the hang-up: %+v", end.Run)
	}
	// The daemon still serves other clients.
	c2 := d.client()
	if _, err := c2.NewSession(ctx); err != nil {
		t.Fatalf("daemon after a hang-up: %v", err)
	}
}

// What runs is what was approved: a script swapped on disk after the
// approval either is refused (the index noticed the change) or does not
// run (the run mounts the copy pinned when the confirmation was asked for).
func TestDaemonApprovedScriptCannotBeSwapped(t *testing.T) {
	needDaemon(t)
	root := extraSkill(t, "guarded-swap", "scripts/x.sh", "echo approved-bytes\n")
	d := newItDaemon(t, root)
	d.start()
	defer d.stop()
	ctx := ctxT(t)
	c := d.client()
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"guarded-swap"}}))
	req := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/x.sh"}
	_, err := c.RunScript(ctx, api.Peer{}, req)
	ce := wantKind(t, "guarded run", err, api.KindConfirmationRequired)
	conf, _ := ce.ConfirmationRequired()
	must[*api.Confirmation](t, "approve")(c.ApproveConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: conf.ConfirmationID}))

	// Swap the script by rename while the approved call is being set up,
	// as an attacker with write access to the skills root would.
	script := filepath.Join(root, "guarded-swap", "scripts", "x.sh")
	if err := os.WriteFile(script+".new", []byte("echo UNAPPROVED-bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req.ConfirmationID = conf.ConfirmationID
	type answer struct {
		res *api.RunScriptResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.RunScript(ctx, api.Peer{}, req)
		done <- answer{res, err}
	}()
	time.Sleep(30 * time.Millisecond) // the swap races the approved run's start
	if err := os.Rename(script+".new", script); err != nil {
		t.Fatal(err)
	}
	a := <-done
	res, err := a.res, a.err
	switch {
	case err != nil:
		wantKind(t, "run of a swapped script", err, api.KindInvalidParams)
	case strings.Contains(res.Stdout, "UNAPPROVED"):
		t.Fatalf("the swapped, unapproved script ran: %+v", res)
	case !strings.Contains(res.Stdout, "approved-bytes"):
		t.Fatalf("approved run: %+v", res)
	}
}
