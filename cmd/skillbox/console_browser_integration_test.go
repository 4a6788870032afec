//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/runner"
)

// consoleChromium is Debian's Chromium (hack/install-deps.sh installs it);
// the browser test never downloads one.
const consoleChromium = "/usr/bin/chromium"

// ArtifactsDir is where tests keep what CI uploads (screenshots):
// $SKILLBOX_ARTIFACTS, else /var/tmp/skillbox-artifacts.
func artifactsDir() string {
	if d := os.Getenv("SKILLBOX_ARTIFACTS"); d != "" {
		return d
	}
	return "/var/tmp/skillbox-artifacts"
}

// needBrowser skips (or fails, when sandboxes are required) without Node.js
// and Chromium, and installs the front end's locked packages once
// (playwright-core) when node_modules is missing.
func needBrowser(t *testing.T, webDir string) {
	t.Helper()
	for _, bin := range []string{"node", "npm", consoleChromium} {
		if _, err := exec.LookPath(bin); err != nil {
			runtimetest.SkipUnlessRequired(t, "%s is missing (%v): the console's browser test needs Node.js, npm and Debian's chromium (hack/install-deps.sh)", bin, err)
		}
	}
	if _, err := os.Stat(filepath.Join(webDir, "node_modules", "playwright-core")); err == nil {
		return
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = webDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", webDir, err, out)
	}
}

// startConsole starts a `skillbox console` and returns its printed URL;
// it is stopped when the test ends.
func startConsole(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s := strings.TrimSpace(sc.Text()); strings.HasPrefix(s, "http://127.0.0.1:") {
				urls <- s
			}
		}
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(30 * time.Second):
		t.Fatalf("%s printed no URL; stderr: %s", cmd.Path, stderr.String())
	}
	return ""
}

// tamperAuditLog flips the case of one letter of a record's event in the
// middle of the oldest audit file, in place (the daemon keeps appending).
func tamperAuditLog(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
	if len(files) == 0 {
		t.Fatalf("no audit files in %s", dir)
	}
	sort.Strings(files)
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(raw, []byte("\n"))
	var off int
	for _, l := range lines[:len(lines)/2] {
		off += len(l)
	}
	i := bytes.Index(raw[off:], []byte(`"event":"`))
	if i < 0 {
		t.Fatalf("no event field after byte %d of %s", off, files[0])
	}
	at := int64(off + i + len(`"event":"`))
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{raw[at] ^ 0x20}, at); err != nil {
		t.Fatal(err)
	}
}

// tickerSkill is a skill whose script prints a line every 200 ms for
// 30 s: the live run the browser follows and cancels.
func tickerSkill(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "sbticker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	runItWriteFile(t, filepath.Join(root, "live-ticker", "SKILL.md"),
		"---\nname: live-ticker\ndescription: Prints a line every 200 ms for 30 s. Use only in tests of live output.\n---\n# live-ticker\n\nRun scripts/tick.py.\n")
	runItWriteFile(t, filepath.Join(root, "live-ticker", "scripts", "tick.py"),
		"import time\nfor i in range(1, 151):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.2)\n")
	return root
}

// TestConsoleBrowser drives the console's pages in Chromium against a real
// daemon and a real gVisor run held for confirmation
// (sandbox/doors/console/web/e2e/console.mjs does the browser's part): approve
// in the page and the held run completes; a second approval is refused; a
// non-approver's console offers no approval and the socket refuses it;
// audit search finds the run with the chain intact; a run that prints a
// line every 200 ms shows its lines in Live runs as they come, and Cancel
// ends it with reason cancelled; the skill's charts
// are drawn (screenshots kept under artifactsDir); a tampered log shows as
// broken.
func TestConsoleBrowser(t *testing.T) {
	needDaemon(t)
	webDir := filepath.Join(itRepo, "sandbox", "doors", "console", "web")
	needBrowser(t, webDir)
	d := newItDaemon(t, tickerSkill(t))
	d.start()
	defer d.stop()
	c := d.client()
	ctx := ctxT(t)

	const skill = "guarded-deploy"
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	var digest string
	for _, s := range must[[]api.SkillInfo](t, "skills.list")(c.ListSkills(ctx, api.Peer{}, api.ListSkillsParams{SessionID: sid})) {
		if s.Name == skill {
			digest = s.Digest
		}
	}
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{skill}}))
	run := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"web", "staging", "1.2.3"}}, Skill: skill, Path: "scripts/deploy.sh"}
	_, err := c.RunScript(ctx, api.Peer{}, run)
	conf, ok := wantKind(t, "the guarded run", err, api.KindConfirmationRequired).ConfirmationRequired()
	if !ok || digest == "" {
		t.Fatalf("confirmation %+v, skill digest %q", conf, digest)
	}

	// The held run: repeated with the confirmation until an approver
	// approves it in the browser, then run in gVisor.
	type outcome struct {
		res *api.RunScriptResult
		err error
	}
	held := make(chan outcome, 1)
	go func() {
		run := run
		run.ConfirmationID = conf.ConfirmationID
		for {
			res, err := c.RunScript(ctx, api.Peer{}, run)
			var ce *client.Error
			if errors.As(err, &ce) && ce.Kind == api.KindConfirmationRequired && ctx.Err() == nil {
				time.Sleep(500 * time.Millisecond)
				continue
			}
			held <- outcome{res, err}
			return
		}
	}()

	// The socket refuses nobody's approval (this also puts the binary
	// where nobody can run it).
	if _, stderr, code := d.callAsNobody(t, "confirmations.approve", `{"id":"`+conf.ConfirmationID+`"}`); code != 1 || !strings.Contains(stderr, "error (denied)") || !strings.Contains(stderr, "65534") {
		t.Fatalf("nobody approves over the socket: exit %d, stderr %q", code, stderr)
	}

	rootURL := startConsole(t, exec.Command(itBin, "console", "--socket", d.socket))
	nobody := exec.Command(filepath.Join(d.base, "skillbox"), "console", "--socket", d.socket)
	nobody.Dir, nobody.Env = "/", []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	nobodyURL := startConsole(t, nobody)

	bctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := exec.CommandContext(bctx, "node", "e2e/console.mjs")
	node.Dir = webDir
	node.Env = append(os.Environ(),
		"CONSOLE_URL="+rootURL, "NOBODY_URL="+nobodyURL, "CONFIRMATION_ID="+conf.ConfirmationID, "SESSION_ID="+sid,
		"SKILL="+skill, "SKILL_DIGEST="+digest, "ARGS="+strings.Join(runner.QuoteAll(run.Args), " "), "ARTIFACTS="+artifactsDir(), "CHROMIUM="+consoleChromium)
	var stderr bytes.Buffer
	node.Stderr = &stderr
	stdin, err := node.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := node.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	live := make(chan outcome, 1)
	passed := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		t.Logf("browser: %s", line)
		switch line {
		case "WAIT held-run":
			var o outcome
			select {
			case o = <-held:
			case <-time.After(2 * time.Minute):
				t.Fatal("the held run did not finish within 2 minutes of the approval")
			}
			if o.err != nil || o.res.ExitCode != 0 || !strings.Contains(o.res.Stdout, "deployed web@1.2.3 to staging") {
				t.Fatalf("the approved run: %+v, %v", o.res, o.err)
			}
			t.Logf("the held run completed in gVisor: %d ms", o.res.DurationMS)
			io.WriteString(stdin, "ok\n")
		case "WAIT live-run":
			tickSID := must[string](t, "sessions.create")(c.NewSession(ctx))
			must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: tickSID, Names: []string{"live-ticker"}}))
			go func() {
				res, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: tickSID, TimeoutMS: 120_000}, Skill: "live-ticker", Path: "scripts/tick.py"})
				if err != nil {
					t.Errorf("the live run: %v", err)
					node.Process.Kill()
				}
				live <- outcome{res, err}
			}()
			io.WriteString(stdin, "ok\n")
		case "WAIT live-run-ended":
			var o outcome
			select {
			case o = <-live:
			case <-time.After(time.Minute):
				t.Fatal("the cancelled run did not return within a minute")
			}
			if o.err != nil || o.res.Reason != "cancelled" || !strings.Contains(o.res.Stdout, "tick 1\n") {
				t.Fatalf("the cancelled run: %+v, %v", o.res, o.err)
			}
			t.Logf("the live run was cancelled after %d ms", o.res.DurationMS)
			io.WriteString(stdin, "ok\n")
		case "WAIT tamper":
			tamperAuditLog(t, d.auditDir)
			io.WriteString(stdin, "ok\n")
		case "PASS":
			passed = true
		}
	}
	err = node.Wait()
	if err != nil || !passed {
		t.Fatalf("the browser test failed (%v):\n%s", err, stderr.String())
	}
	for _, f := range []string{"console-confirmation.png", "console-live-run.png", "console-skill-history.png", "console-chain-broken.png"} {
		if fi, err := os.Stat(filepath.Join(artifactsDir(), f)); err != nil || fi.Size() == 0 {
			t.Errorf("screenshot %s: %v", f, err)
		}
	}
	fmt.Fprintf(os.Stderr, "console screenshots in %s\n", artifactsDir())
}
