//go:build integration

package main

// The skill lifecycle end to end on a real `skillbox serve` (real socket,
// real client, real gVisor sandboxes, the real audit log): skills.activate
// with !`command`s in the sandbox, hooks around tools.check and
// tools.report, pinned versions, proposals reviewed with the CLI, bound
// skills and token counts.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/skills"
)

const lifecyclePolicy = `
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "skills.run_code", "Bash", "Read"]
}
policy "guarded-hooks" {
  skills  = ["hook-guarded"]
  confirm = ["skills.run_script"]
}
policy "locked-hooks" {
  skills = ["hook-locked"]
  deny   = ["skills.run_script", "skills.run_code"]
}
policy "render" {
  skills = ["render-demo"]
  tools  = ["skills.render_command"]
}
policy "render-confirm" {
  skills  = ["render-held"]
  tools   = ["skills.render_command"]
  confirm = ["skills.render_command"]
}
policy "slow-hooks" {
  skills       = ["hanging"]
  hook_timeout = "3s"
}
policy "pinned" {
  skills       = ["pinned-*"]
  require_lock = true
}
agent "reviewer" {
  uses_skills = ["hooked", "evolving"]
}
`

// newLifecycleDaemon is a daemon over the given roots with the lifecycle
// policy, extensions allowed (hooks, invocation fields) and a lock file.
func newLifecycleDaemon(t *testing.T, roots ...string) (*itDaemon, string) {
	t.Helper()
	d := newItDaemon(t, roots...)
	b, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), itPolicy, lifecyclePolicy, 1)
	lockFile := filepath.Join(d.base, "skills.lock")
	re := regexp.MustCompile(`(?m)^skills \{ roots = (\[.*\]) \}$`)
	if !re.MatchString(cfg) {
		t.Fatalf("the daemon test config has no one-line skills block:\n%s", cfg)
	}
	cfg = re.ReplaceAllString(cfg, fmt.Sprintf("skills {\n  roots = $1\n  allow_extensions = true\n  lock_file = %q\n}", lockFile))
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return d, lockFile
}

func lifecycleRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "sbit-life-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// hostAddr is an address of this host other than loopback, if it has one.
func hostAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
			return ip.IP.String()
		}
	}
	return ""
}

func auditEvents(recs []*audit.Record, event, method string) []*audit.Record {
	var out []*audit.Record
	for _, r := range recs {
		if r.Event == event && (method == "" || r.Method == method) {
			out = append(out, r)
		}
	}
	return out
}

// A !`command` runs in a fresh sandbox: it sees the skill's files and
// nothing of the host, has no network, fails visibly, and is audited like
// a run; without a rule it is denied; a confirmable one runs once approved.
func TestDaemonActivateRenderCommands(t *testing.T) {
	needDaemon(t)
	root := lifecycleRoot(t)

	// What a command must not see: a file on the host and a listener on
	// every host address.
	secretDir := lifecycleRoot(t)
	secret := filepath.Join(secretDir, "host-secret.txt")
	marker := fmt.Sprintf("HOST-SECRET-%d", time.Now().UnixNano())
	if err := os.WriteFile(secret, []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nHOST-LISTENER\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	host := hostAddr()
	if host == "" {
		host = "127.0.0.1"
	}

	writeFiles(t, root, map[string]string{
		"render-demo/SKILL.md": "---\nname: render-demo\ndescription: Renders arguments and sandboxed commands.\n---\n" +
			"Issue $0 of $ARGUMENTS[1] (all: $ARGUMENTS) in ${SKILL_DIR}.\n" +
			"Data: !`cat ${SKILL_DIR}/data.txt`\n" +
			"Host: !`cat " + secret + " 2>&1 || echo NO-HOST-FILE`\n" +
			"Net: !`curl -sS -m 5 http://" + host + ":" + fmt.Sprint(port) + "/ 2>&1 || echo NO-NETWORK`\n" +
			"Root: !`ls /`\n" +
			"Fail: !`echo oops >&2; exit 3`\n",
		"render-demo/data.txt": "inside-the-skill\n",
		"render-denied/SKILL.md": "---\nname: render-denied\ndescription: Has a command no rule allows.\n---\n" +
			"Today: !`date +%Y`\n",
		"render-held/SKILL.md": "---\nname: render-held\ndescription: Has a command that needs an approver.\n---\n" +
			"Held: !`echo approved-output`\n",
		"user-only/SKILL.md":  "---\nname: user-only\ndescription: Only a person invokes this.\ndisable-model-invocation: true\n---\nDo $ARGUMENTS.\n",
		"background/SKILL.md": "---\nname: background\ndescription: Knowledge, not a command.\nuser-invocable: false\n---\nKnow things.\n",
	})
	d, _ := newLifecycleDaemon(t, root)
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))

	res := must[*api.ActivateResult](t, "activate render-demo")(c.ActivateSkill(ctx, api.Peer{}, api.ActivateParams{
		SessionID: sid, Name: "render-demo", Arguments: `42 "two words"`,
	}))
	t.Logf("rendered body:\n%s", res.Body)
	for _, want := range []string{
		`Issue 42 of two words (all: 42 "two words") in .`,
		"Data: inside-the-skill",
		"NO-HOST-FILE",
		"NO-NETWORK",
		"[skillbox: command `echo oops >&2; exit 3` failed (exit status 3",
		"oops",
	} {
		if !strings.Contains(res.Body, want) {
			t.Errorf("rendered body lacks %q", want)
		}
	}
	if strings.Contains(res.Body, marker) || strings.Contains(res.Body, "HOST-LISTENER") || accepted.Load() != 0 {
		t.Errorf("a command reached the host (file or network): %d connections, body:\n%s", accepted.Load(), res.Body)
	}
	if root := res.Body[strings.Index(res.Body, "Root:"):strings.Index(res.Body, "Fail:")]; !strings.Contains(root, "skills\n") ||
		!strings.Contains(root, "work\n") || strings.Contains(root, filepath.Base(secretDir)) {
		t.Errorf("ls / shows something other than the sandbox image:\n%s", root)
	}
	if len(res.Commands) != 5 || res.Tokens == 0 {
		t.Fatalf("commands %+v, tokens %d", res.Commands, res.Tokens)
	}
	for _, rc := range res.Commands {
		if rc.RunID == "" {
			t.Errorf("command %q did not run: %+v", rc.Command, rc)
		}
	}
	if rc := res.Commands[4]; rc.ExitCode != 3 || rc.Error == "" {
		t.Errorf("failing command: %+v", rc)
	}

	recs := d.records()
	starts := auditEvents(recs, audit.EventRunStart, api.MethodSkillsActivate)
	ends := auditEvents(recs, audit.EventRunEnd, api.MethodSkillsActivate)
	if len(starts) != 5 || len(ends) != 5 {
		t.Fatalf("audit: %d run.start and %d run.end for the 5 commands", len(starts), len(ends))
	}
	for _, r := range starts {
		if r.Run == nil || r.Run.Network || r.Detail["command"] == "" || r.Skill == nil || r.Skill.Name != "render-demo" {
			t.Errorf("run.start of a command: %+v", r)
		}
	}
	decisions := 0
	for _, r := range auditEvents(recs, audit.EventDecision, api.MethodSkillsActivate) {
		if r.Decision != nil && r.Decision.Tool == api.ToolRenderCommand && r.Decision.Effect == "allow" {
			decisions++
		}
	}
	if decisions != 5 {
		t.Errorf("audit: %d allow decisions of skills.render_command, want 5", decisions)
	}
	if len(auditEvents(recs, "skills.activate", api.MethodSkillsActivate)) != 1 {
		t.Errorf("no skills.activate record")
	}

	// No rule lists skills.render_command for this skill: denied, and the
	// body says so where the output would be.
	res = must[*api.ActivateResult](t, "activate render-denied")(c.ActivateSkill(ctx, api.Peer{}, api.ActivateParams{SessionID: sid, Name: "render-denied"}))
	if !strings.Contains(res.Body, "[skillbox: command `date +%Y` was not run:") || !strings.Contains(res.Body, "denied") ||
		len(res.Commands) != 1 || res.Commands[0].RunID != "" {
		t.Errorf("denied command: %+v", res)
	}

	// Confirmable: held until an approver approves, then run once.
	res = must[*api.ActivateResult](t, "activate render-held")(c.ActivateSkill(ctx, api.Peer{}, api.ActivateParams{SessionID: sid, Name: "render-held"}))
	if len(res.Commands) != 1 || res.Commands[0].ConfirmationID == "" || strings.Contains(res.Body, "Held: approved-output") {
		t.Fatalf("held command: %+v", res)
	}
	id := res.Commands[0].ConfirmationID
	must[*api.Confirmation](t, "approve")(c.ApproveConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: id}))
	res = must[*api.ActivateResult](t, "activate approved")(c.ActivateSkill(ctx, api.Peer{}, api.ActivateParams{SessionID: sid, Name: "render-held", ConfirmationID: id}))
	if !strings.Contains(res.Body, "Held: approved-output") {
		t.Errorf("approved command: %+v", res)
	}
	res = must[*api.ActivateResult](t, "activate again")(c.ActivateSkill(ctx, api.Peer{}, api.ActivateParams{SessionID: sid, Name: "render-held", ConfirmationID: id}))
	if strings.Contains(res.Body, "Held: approved-output") {
		t.Errorf("an approval was used twice: %s", res.Body)
	}

	// Invocation kinds: the refusal says why.
	_, err = c.ActivateSkill(ctx, api.Peer{}, api.ActivateParams{SessionID: sid, Name: "user-only"})
	if e := wantKind(t, "model activates user-only", err, api.KindDenied); !strings.Contains(e.Message, "disable-model-invocation") {
		t.Errorf("refusal: %s", e.Message)
	}
	res = must[*api.ActivateResult](t, "user activates user-only")(c.ActivateSkill(ctx, api.Peer{}, api.ActivateParams{
		SessionID: sid, Name: "user-only", Arguments: "the thing", Invocation: api.InvocationUser}))
	if !strings.Contains(res.Body, "Do the thing.") {
		t.Errorf("user invocation: %q", res.Body)
	}
	_, err = c.ActivateSkill(ctx, api.Peer{}, api.ActivateParams{SessionID: sid, Name: "background", Invocation: api.InvocationUser})
	if e := wantKind(t, "user activates background", err, api.KindDenied); !strings.Contains(e.Message, "user-invocable") {
		t.Errorf("refusal: %s", e.Message)
	}

	// The CLI renders through the daemon.
	out, err := exec.Command(itBin, "skills", "render", "--daemon", "--socket", d.socket, "--user", "user-only", "--", "it", "now").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Do it now.") {
		t.Errorf("skillbox skills render: %v\n%s", err, out)
	}
	if out, code := verify(t, d.auditDir); code != 0 {
		t.Errorf("audit verify: %s", out)
	}
}

// Hooks run in the sandbox: a PreToolUse hook blocks Bash(rm:*) with its
// reason, a hanging hook is killed at its limit and denies, a hook cannot
// allow what policy denies, PostToolUse hooks run on tools.report; bound
// skills and token counts ride along.
func TestDaemonHooks(t *testing.T) {
	needDaemon(t)
	root := lifecycleRoot(t)
	writeFiles(t, root, map[string]string{
		"hooked/SKILL.md": `---
name: hooked
description: Blocks rm through a hook.
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - type: command
          command: sh ./hooks/no-rm.sh
    - matcher: Write
      hooks:
        - type: command
          command: echo '{"hookSpecificOutput":{"permissionDecision":"allow"}}'
  PostToolUse:
    - matcher: Bash
      hooks:
        - type: command
          command: echo '{"decision":"block","reason":"post hook saw the result"}'
---
Never delete files.
`,
		"hooked/hooks/no-rm.sh": `cmd=$(jq -r .tool_input.command)
case "$cmd" in
  rm|rm\ *) echo "rm is blocked by the hooked skill" >&2; exit 2 ;;
esac
exit 0
`,
		"hanging/SKILL.md": `---
name: hanging
description: Its hook never answers.
hooks:
  PreToolUse:
    - matcher: Read
      hooks:
        - type: command
          command: sleep 600
---
Body.
`,
		"evolving/SKILL.md": "---\nname: evolving\ndescription: Bound to the reviewer agent.\n---\nVersion one.\n",
	})
	d, _ := newLifecycleDaemon(t, root)
	d.start()
	c := d.client()
	ctx := ctxT(t)

	// Bound skills: the reviewer agent starts with hooked and evolving.
	cs := must[*api.CreateSessionResult](t, "sessions.create agent")(c.CreateSession(ctx, api.Peer{}, api.CreateSessionParams{Agent: "reviewer"}))
	sid := cs.SessionID
	ins := must[*api.InstructionsResult](t, "instructions")(c.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	for _, want := range []string{"Never delete files.", "Version one."} {
		if !strings.Contains(ins.Instructions, want) {
			t.Errorf("the reviewer's session lacks %q in its active skills", want)
		}
	}
	_, err := c.CreateSession(ctx, api.Peer{}, api.CreateSessionParams{UsesSkills: []string{"no-such-skill"}})
	wantKind(t, "uses_skills with an unknown skill", err, api.KindNotFound)
	_, err = c.CreateSession(ctx, api.Peer{}, api.CreateSessionParams{Agent: "nobody"})
	wantKind(t, "unknown agent", err, api.KindNotFound)

	// Token counts.
	list := must[[]api.SkillInfo](t, "skills.list")(c.ListSkills(ctx, api.Peer{}, api.ListSkillsParams{SessionID: sid}))
	for _, s := range list {
		if s.Tokens <= 0 || s.BodyTokens <= 0 {
			t.Errorf("skills.list %s: tokens %d, body %d", s.Name, s.Tokens, s.BodyTokens)
		}
	}
	rr := must[*api.ReadResult](t, "skills.read")(c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Skill: "hooked", Path: "hooks/no-rm.sh"}))
	if rr.Tokens != skills.EstimateTokens(rr.Content) || rr.Tokens == 0 {
		t.Errorf("skills.read tokens %d", rr.Tokens)
	}

	check := func(tool, command string) *api.CheckToolResult {
		t.Helper()
		in, _ := json.Marshal(map[string]string{"command": command, "file_path": command})
		return must[*api.CheckToolResult](t, "tools.check "+tool)(c.CheckTool(ctx, api.Peer{}, api.CheckToolParams{SessionID: sid, Tool: tool, Input: in}))
	}
	if r := check("Bash", "rm -rf /tmp/x"); r.Decision != "deny" || !strings.Contains(r.Reason, "rm is blocked by the hooked skill") || !strings.Contains(r.Rule, "hook PreToolUse") {
		t.Errorf("rm: %+v", r)
	}
	if r := check("Bash", "ls -l"); r.Decision != "allow" {
		t.Errorf("ls: %+v", r)
	}
	// Policy denies Write; the hook's "allow" cannot change that.
	if r := check("Write", "/tmp/x"); r.Decision != "deny" || strings.Contains(r.Rule, "hook") {
		t.Errorf("Write: %+v", r)
	}
	rep := must[*api.ReportToolResult](t, "tools.report")(c.ReportTool(ctx, api.Peer{}, api.ReportToolParams{
		SessionID: sid, Tool: "Bash", Input: json.RawMessage(`{"command":"ls"}`), Result: json.RawMessage(`{"stdout":"a\nb\n"}`)}))
	if !rep.Block || !strings.Contains(rep.Reason, "post hook saw the result") || len(rep.Hooks) != 1 || rep.Hooks[0].RunID == "" {
		t.Errorf("tools.report: %+v", rep)
	}

	// A hook that hangs is killed at the policy's hook_timeout and denies.
	sid2 := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load hanging")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid2, Names: []string{"hanging"}}))
	in, _ := json.Marshal(map[string]string{"file_path": "README.md"})
	r := must[*api.CheckToolResult](t, "tools.check hanging")(c.CheckTool(ctx, api.Peer{}, api.CheckToolParams{SessionID: sid2, Tool: "Read", Input: in}))
	if r.Decision != "deny" || !strings.Contains(r.Reason, "did not answer within 3s") || !strings.Contains(r.Reason, "fail closed") {
		t.Errorf("hanging hook: %+v", r)
	}

	recs := d.records()
	timedOut, hookDecisions := 0, 0
	for _, rec := range auditEvents(recs, audit.EventRunEnd, api.MethodToolsCheck) {
		if rec.Run != nil && rec.Run.Reason == "timeout" && rec.Skill != nil && rec.Skill.Name == "hanging" {
			timedOut++
		}
	}
	for _, rec := range auditEvents(recs, audit.EventDecision, "") {
		if rec.Detail["hook_event"] != "" {
			hookDecisions++
		}
	}
	if timedOut != 1 || hookDecisions != 4 {
		t.Errorf("audit: %d timed-out hook runs (want 1), %d hook decisions (want 4: rm, ls, report, hanging)", timedOut, hookDecisions)
	}
	if len(d.containers()) != 0 {
		t.Errorf("sandboxes left behind: %v", d.containers())
	}
}

// A hook is a run of its skill: the PostToolUse hook
// of a skill whose run_script needs confirmation does not run its deploy
// script until an approver approves, and then once; the hooks of a skill
// whose run_script and run_code are denied never run; tools.report of a
// call policy denies runs no hook.
func TestDaemonHookPolicy(t *testing.T) {
	needDaemon(t)
	root := lifecycleRoot(t)
	writeFiles(t, root, map[string]string{
		"hook-guarded/SKILL.md": `---
name: hook-guarded
description: Deploys from a PostToolUse hook.
hooks:
  PostToolUse:
    - matcher: Bash
      hooks:
        - type: command
          command: ./scripts/deploy.sh
---
Deploys after every Bash call.
`,
		"hook-guarded/scripts/deploy.sh": "#!/bin/sh\necho deployed-by-hook\n",
		"hook-locked/SKILL.md": `---
name: hook-locked
description: Its scripts may not run at all.
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - type: command
          command: ./scripts/deploy.sh
  PostToolUse:
    - matcher: Bash
      hooks:
        - type: command
          command: echo '{"decision":"approve"}'; ./scripts/deploy.sh
---
Locked down.
`,
		"hook-locked/scripts/deploy.sh": "#!/bin/sh\necho deployed-by-hook\n",
	})
	d, _ := newLifecycleDaemon(t, root)
	d.start()
	c := d.client()
	ctx := ctxT(t)
	hookRuns := func(skill string) int {
		n := 0
		for _, r := range auditEvents(d.records(), audit.EventRunStart, "") {
			if r.Skill != nil && r.Skill.Name == skill {
				n++
			}
		}
		return n
	}
	bash := json.RawMessage(`{"command":"ls"}`)

	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load hook-guarded")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"hook-guarded"}}))
	report := api.ReportToolParams{SessionID: sid, Tool: "Bash", Input: bash, Result: json.RawMessage(`{"stdout":"x"}`)}
	_, err := c.ReportTool(ctx, api.Peer{}, report)
	conf, ok := wantKind(t, "tools.report with a guarded hook", err, api.KindConfirmationRequired).ConfirmationRequired()
	if !ok || !strings.Contains(conf.Rule, "guarded-hooks") {
		t.Fatalf("confirmation data of %v", err)
	}
	if n := hookRuns("hook-guarded"); n != 0 {
		t.Fatalf("the guarded hook ran %d times without approval", n)
	}
	must[*api.Confirmation](t, "approve")(c.ApproveConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: conf.ConfirmationID}))
	report.ConfirmationID = conf.ConfirmationID
	rep := must[*api.ReportToolResult](t, "approved tools.report")(c.ReportTool(ctx, api.Peer{}, report))
	if len(rep.Hooks) != 1 || rep.Hooks[0].RunID == "" || rep.Hooks[0].ExitCode != 0 || rep.Block || hookRuns("hook-guarded") != 1 {
		t.Fatalf("approved hook: %+v, %d runs", rep, hookRuns("hook-guarded"))
	}
	_, err = c.ReportTool(ctx, api.Peer{}, report)
	wantKind(t, "the approval used again", err, api.KindConfirmationRequired)
	if n := hookRuns("hook-guarded"); n != 1 {
		t.Fatalf("the hook ran %d times on one approval", n)
	}
	// A call policy denies (Write is in no rule) runs no hook.
	rep = must[*api.ReportToolResult](t, "tools.report Write")(c.ReportTool(ctx, api.Peer{}, api.ReportToolParams{SessionID: sid, Tool: "Write", Input: json.RawMessage(`{"file_path":"/tmp/x"}`)}))
	if rep.Decision != "deny" || !rep.Block || len(rep.Hooks) != 0 {
		t.Errorf("tools.report of a denied call: %+v", rep)
	}

	lsid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load hook-locked")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: lsid, Names: []string{"hook-locked"}}))
	chk := must[*api.CheckToolResult](t, "tools.check")(c.CheckTool(ctx, api.Peer{}, api.CheckToolParams{SessionID: lsid, Tool: "Bash", Input: bash}))
	if chk.Decision != "deny" || !strings.Contains(chk.Reason, "policy does not let the hook run") {
		t.Errorf("tools.check with a denied hook: %+v", chk)
	}
	rep = must[*api.ReportToolResult](t, "tools.report")(c.ReportTool(ctx, api.Peer{}, api.ReportToolParams{SessionID: lsid, Tool: "Bash", Input: bash}))
	if !rep.Block || len(rep.Hooks) != 1 || rep.Hooks[0].RunID != "" || !strings.Contains(rep.Reason, "policy does not let the hook run") {
		t.Errorf("tools.report with a denied hook: %+v", rep)
	}
	if n := hookRuns("hook-locked"); n != 0 {
		t.Errorf("the denied hooks ran %d times", n)
	}
	if len(d.containers()) != 0 {
		t.Errorf("sandboxes left behind: %v", d.containers())
	}
}

// Pinned versions and proposals: a lock required by policy refuses a
// changed skill naming both digests, re-locking restores it; a proposal
// round trip through the CLI changes the skill and its lock, a stale one is
// refused, and a read-only root gets a patch file instead.
func TestDaemonLockAndProposals(t *testing.T) {
	needDaemon(t)
	root := lifecycleRoot(t)
	writeFiles(t, root, map[string]string{
		"pinned-one/SKILL.md":      "---\nname: pinned-one\ndescription: Runs only at an approved version.\n---\nRun scripts/hi.sh.\n",
		"pinned-one/scripts/hi.sh": "echo hello from the pinned version\n",
		"evolving/SKILL.md":        "---\nname: evolving\ndescription: Agents propose changes to it.\n---\nVersion one.\nKeep this line.\n",
	})
	// A read-only root: a bind mount of a directory, remounted read-only.
	roSrc, roDir := lifecycleRoot(t), lifecycleRoot(t)
	writeFiles(t, roSrc, map[string]string{"frozen/SKILL.md": "---\nname: frozen\ndescription: Lives on a read-only root.\n---\nOld text.\n"})
	if err := unix.Mount(roSrc, roDir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(roDir, unix.MNT_DETACH) })
	if err := unix.Mount("", roDir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("read-only remount: %v", err)
	}

	d, lockFile := newLifecycleDaemon(t, root, roDir)
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))

	digestOf := func(name string) string {
		t.Helper()
		for _, s := range must[[]api.SkillInfo](t, "skills.list")(c.ListSkills(ctx, api.Peer{}, api.ListSkillsParams{})) {
			if s.Name == name {
				return s.Digest
			}
		}
		t.Fatalf("skill %s not listed", name)
		return ""
	}
	waitDigest := func(name, not string) string {
		t.Helper()
		var dg string
		waitfor.True(t, fmt.Sprintf("skill %s to leave %s after it changed (hot reload)", name, not), time.Minute, func() bool {
			dg = digestOf(name)
			return dg != not
		})
		return dg
	}

	// ---- the lock ----
	_, err := c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"pinned-one"}})
	if e := wantKind(t, "load before locking", err, api.KindDenied); !strings.Contains(e.Message, "not in the lock file") {
		t.Errorf("refusal: %s", e.Message)
	}
	out, err := exec.Command(itBin, "skills", "lock", "--daemon", "--socket", d.socket, "pinned-one").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pinned-one") {
		t.Fatalf("skillbox skills lock: %v\n%s", err, out)
	}
	old := digestOf("pinned-one")
	must[*api.LoadResult](t, "load pinned")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"pinned-one"}}))
	run := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "pinned-one", Path: "scripts/hi.sh"}
	if r := must[*api.RunScriptResult](t, "run pinned")(c.RunScript(ctx, api.Peer{}, run)); !strings.Contains(r.Stdout, "hello from the pinned version") {
		t.Fatalf("run: %+v", r)
	}

	// One byte changes.
	script := filepath.Join(root, "pinned-one", "scripts", "hi.sh")
	b, _ := os.ReadFile(script)
	b[0] = 'E' // "echo" → "Echo"
	if err := os.WriteFile(script, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cur := waitDigest("pinned-one", old)
	_, err = c.RunScript(ctx, api.Peer{}, run)
	if e := wantKind(t, "run after the edit", err, api.KindInvalidParams); !strings.Contains(e.Message, old) || !strings.Contains(e.Message, cur) {
		t.Errorf("run refusal names neither digest: %s", e.Message)
	}
	_, err = c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"pinned-one"}})
	e := wantKind(t, "load after the edit", err, api.KindDenied)
	for _, want := range []string{old, cur, "skillbox skills diff"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("load refusal lacks %q: %s", want, e.Message)
		}
	}
	out, err = exec.Command(itBin, "skills", "diff", "--root", root, "--lock", lockFile, "pinned-one").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "modified scripts/hi.sh") {
		t.Errorf("skillbox skills diff: %v\n%s", err, out)
	}
	must[*api.LockResult](t, "re-lock")(c.LockSkills(ctx, api.Peer{}, api.LockParams{Names: []string{"pinned-one"}}))
	must[*api.LoadResult](t, "load re-locked")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"pinned-one"}}))
	if r := must[*api.RunScriptResult](t, "run re-locked")(c.RunScript(ctx, api.Peer{}, run)); r.ExitCode == 0 {
		t.Errorf("Echo is not a command, the run should fail: %+v", r)
	}
	recs := d.records()
	var refused, locked int
	for _, r := range recs {
		switch {
		case r.Event == "skills.refused" && r.Skill != nil && r.Skill.Digest == cur && r.Detail["locked_digest"] == old:
			refused++
		case r.Event == "skills.lock" && r.Skill != nil && r.Skill.Name == "pinned-one" && r.Outcome == audit.OutcomeOK:
			locked++
		}
	}
	if refused != 1 || locked != 2 {
		t.Errorf("audit: %d refusals of the changed skill (want 1), %d lock records (want 2)", refused, locked)
	}

	// ---- proposals ----
	must[*api.LockResult](t, "lock evolving")(c.LockSkills(ctx, api.Peer{}, api.LockParams{Names: []string{"evolving"}}))
	must[*api.LoadResult](t, "load evolving")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"evolving", "frozen"}, Mode: api.LoadAdd}))
	base := digestOf("evolving")
	diff := func(from, to string) string {
		return "--- a/SKILL.md\n+++ b/SKILL.md\n@@ -3,4 +3,4 @@\n description: Agents propose changes to it.\n ---\n-" + from + "\n+" + to + "\n Keep this line.\n"
	}
	_, err = c.ProposeChange(ctx, api.Peer{}, api.ProposeParams{SessionID: sid, Skill: "evolving", Diff: diff("Version zero.", "Version two."), Justification: "wrong base"})
	wantKind(t, "a diff that does not apply", err, api.KindInvalidParams)
	p1 := must[*api.Proposal](t, "propose")(c.ProposeChange(ctx, api.Peer{}, api.ProposeParams{SessionID: sid, Skill: "evolving",
		Diff: diff("Version one.", "Version two."), Justification: "the skill is at version two", Evidence: "release notes"}))
	p2 := must[*api.Proposal](t, "propose another")(c.ProposeChange(ctx, api.Peer{}, api.ProposeParams{SessionID: sid, Skill: "evolving",
		Diff: diff("Version one.", "Version three."), Justification: "a competing change"}))
	if p1.State != api.ProposalPending || p1.BaseDigest != base || strings.Join(p1.Files, ",") != "SKILL.md" {
		t.Fatalf("proposal: %+v", p1)
	}
	cli := func(sub string, args ...string) string {
		t.Helper()
		out, err := exec.Command(itBin, append([]string{"proposals", sub, "--socket", d.socket}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("skillbox proposals %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := cli("list"); !strings.Contains(out, p1.ID) || !strings.Contains(out, p2.ID) || !strings.Contains(out, "pending") {
		t.Errorf("proposals list:\n%s", out)
	}
	if out := cli("show", p1.ID); !strings.Contains(out, "+Version two.") || !strings.Contains(out, "the skill is at version two") || !strings.Contains(out, base) {
		t.Errorf("proposals show:\n%s", out)
	}
	if out := cli("approve", "--note", "looks right", p1.ID); !strings.Contains(out, "applied") {
		t.Errorf("proposals approve:\n%s", out)
	}
	now := waitDigest("evolving", base)
	shown := must[*api.Proposal](t, "show applied")(c.ShowProposal(ctx, api.Peer{}, api.ProposalIDParams{ID: p1.ID}))
	if shown.State != api.ProposalApplied || shown.NewDigest != now || !shown.LockUpdated {
		t.Errorf("applied proposal: %+v (skill now %s)", shown, now)
	}
	lock, err := skills.ReadLock(lockFile)
	if err != nil || lock.Skills["evolving"].Digest != now {
		t.Errorf("the lock does not follow the approved proposal: %v %+v", err, lock)
	}
	sid2 := must[string](t, "sessions.create")(c.NewSession(ctx))
	act := must[*api.ActivateResult](t, "activate evolving")(c.ActivateSkill(ctx, api.Peer{}, api.ActivateParams{SessionID: sid2, Name: "evolving"}))
	if !strings.Contains(act.Body, "Version two.") || act.Digest != now {
		t.Errorf("the new body is not served: %+v", act)
	}
	// The competing proposal was made against the old digest.
	out, err = exec.Command(itBin, "proposals", "approve", "--socket", d.socket, p2.ID).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "stale") || !strings.Contains(string(out), base) {
		t.Errorf("stale approval: %v\n%s", err, out)
	}
	// The old session still holds the old version: proposing against it is refused.
	_, err = c.ProposeChange(ctx, api.Peer{}, api.ProposeParams{SessionID: sid, Skill: "evolving", Diff: diff("Version one.", "Version four."), Justification: "old view"})
	wantKind(t, "propose against the old digest", err, api.KindInvalidParams)
	if out := cli("reject", "--note", "superseded", p2.ID); !strings.Contains(out, "rejected") {
		t.Errorf("proposals reject:\n%s", out)
	}

	// A read-only root: approval exports a patch, the skill is unchanged.
	frozen := digestOf("frozen")
	p3 := must[*api.Proposal](t, "propose frozen")(c.ProposeChange(ctx, api.Peer{}, api.ProposeParams{SessionID: sid, Skill: "frozen",
		Diff: "--- a/SKILL.md\n+++ b/SKILL.md\n@@ -5 +5 @@\n-Old text.\n+New text.\n", Justification: "update"}))
	p3 = must[*api.Proposal](t, "approve frozen")(c.ApproveProposal(ctx, api.Peer{}, api.ProposalIDParams{ID: p3.ID}))
	patch, err := os.ReadFile(p3.PatchFile)
	if p3.State != api.ProposalExported || err != nil || !bytes.Contains(patch, []byte("+New text.")) {
		t.Errorf("read-only root: %+v, patch %v", p3, err)
	}
	// The patch may hold what the author has not published: root's alone.
	for path, want := range map[string]os.FileMode{filepath.Dir(p3.PatchFile): 0o700 | os.ModeDir, p3.PatchFile: 0o600} {
		st, err := os.Lstat(path)
		if err != nil {
			t.Errorf("proposal patch: %v", err)
		} else if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, st.Mode(), want)
		}
	}
	if digestOf("frozen") != frozen {
		t.Errorf("a read-only skill changed")
	}

	outcomes := map[string]int{}
	for _, r := range d.records() {
		if strings.HasPrefix(r.Event, "proposal.") {
			outcomes[r.Event+":"+r.Outcome]++
		}
	}
	t.Logf("proposal audit records: %v", outcomes)
	if len(outcomes) < 4 {
		t.Errorf("proposal steps missing from the audit: %v", outcomes)
	}
	if out, code := verify(t, d.auditDir); code != 0 {
		t.Errorf("audit verify: %s", out)
	}
}
