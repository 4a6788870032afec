package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/doors/jsonrpc"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
	"github.com/skillbox/skillbox/skills"
)

// ---- harness ----

const testConfig = `
daemon {
  approvers = ["root", "4242"]
  max_active_skills = 3
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script"]
  env    = ["MODE", "DEBUG"]
}
policy "needs-approval" {
  skills  = ["guarded-*"]
  confirm = ["skills.run_script"]
}
`

type daemonHarness struct {
	t      *testing.T
	d      *Daemon
	rt     *servicetest.Runtime
	audit  *servicetest.Auditor
	index  *servicetest.Index
	root   string
	cfg    *policy.Config
	state  *store.StateDB
	engine *runner.Engine
	opts   Options
}

func defaultSkills() []servicetest.SkillSpec {
	return []servicetest.SkillSpec{
		{Name: "hello", Allowed: []string{"skills.read", "skills.run_script"}, Files: map[string]string{
			"scripts/run.py":  "print('hi')\n",
			"scripts/run.sh":  "echo hi\n",
			"references/a.md": "reference A\n",
		}},
		{Name: "other", Requires: []string{"hello"}, Files: map[string]string{"scripts/run.py": "print('other')\n"}},
		{Name: "third", Files: map[string]string{"scripts/run.py": "print('third')\n"}},
		{Name: "fourth", Files: map[string]string{"scripts/run.py": "print('fourth')\n"}},
		{Name: "guarded-deploy", Files: map[string]string{"scripts/deploy.sh": "echo deploying \"$@\"\n"}},
	}
}

// harnessOption changes the daemon's options (with the harness's state DB
// at hand) before NewDaemon.
type harnessOption func(o *Options, st *store.StateDB)

func newHarness(t *testing.T, config string, specs []servicetest.SkillSpec, opts ...harnessOption) *daemonHarness {
	t.Helper()
	cfg, err := policy.Parse([]byte(config), "test.hcl")
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	root := t.TempDir()
	idx := servicetest.NewIndex()
	for _, sp := range specs {
		idx.Put(servicetest.MakeSkill(t, root, sp))
	}
	st, err := store.OpenStateDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := &servicetest.Runtime{}
	au := &servicetest.Auditor{}
	j := audit.NewJournal(au, nil)
	eng := runner.New(runner.Options{Config: cfg, Images: &servicetest.Images{}, Runtime: rt, Audit: j, Pins: servicetest.LivePins{}})
	o := Options{Options: service.Options{
		Config: cfg, Skills: idx, Engine: eng,
		Sessions:      store.NewSessionStore(st, store.SessionOptions{}),
		Confirmations: store.NewConfirmationStore(st, store.ConfirmationOptions{}),
		Audit:         j,
	}}
	for _, f := range opts {
		f(&o, st)
	}
	d := New(o)
	return &daemonHarness{t: t, d: d, rt: rt, audit: au, index: idx, root: root, cfg: cfg, state: st, engine: o.Engine, opts: o}
}

var (
	peerA        = api.Peer{UID: 1000, GID: 1000, PID: 111, Process: "host-a"}
	peerB        = api.Peer{UID: 1001, GID: 1001, PID: 222, Process: "host-b"}
	peerRoot     = api.Peer{UID: 0, GID: 0, PID: 1, Process: "approver"}
	peerApprover = api.Peer{UID: 4242, GID: 4242, PID: 333, Process: "approver-uid"}
)

// call invokes method through the daemon's registered handler, as the
// server would for a connection from peer. It returns the JSON result or
// the error as it would go on the wire.
func (h *daemonHarness) call(peer api.Peer, method string, params any) (json.RawMessage, *jsonrpc.Error) {
	h.t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		h.t.Fatal(err)
	}
	handler := h.d.Server().Handler(method)
	if handler == nil {
		h.t.Fatalf("no handler for %s", method)
	}
	res, herr := handler(context.Background(), &jsonrpc.Call{ID: json.RawMessage(`7`), Method: method, Params: raw, Peer: peer, ConnID: 1})
	if herr != nil {
		return nil, jsonrpc.ToRPCError(herr)
	}
	out, err := json.Marshal(res)
	if err != nil {
		h.t.Fatalf("%s: result does not marshal: %v", method, err)
	}
	return out, nil
}

// ok calls and fails the test on an error; it decodes the result into v.
func (h *daemonHarness) ok(peer api.Peer, method string, params, v any) {
	h.t.Helper()
	raw, e := h.call(peer, method, params)
	if e != nil {
		h.t.Fatalf("%s: unexpected error %s (code %d): %s", method, e.Kind, e.Code, e.Message)
	}
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			h.t.Fatalf("%s: decoding result %s: %v", method, raw, err)
		}
	}
}

// fails calls and wants an error of kind whose message contains every want.
func (h *daemonHarness) fails(peer api.Peer, method string, params any, kind string, wants ...string) *jsonrpc.Error {
	h.t.Helper()
	raw, e := h.call(peer, method, params)
	if e == nil {
		h.t.Fatalf("%s: want %s error, got result %s", method, kind, raw)
	}
	if e.Kind != kind || e.Code != jsonrpc.CodeForKind(kind) {
		h.t.Fatalf("%s: want kind %s (code %d), got %s (code %d): %s", method, kind, jsonrpc.CodeForKind(kind), e.Kind, e.Code, e.Message)
	}
	for _, w := range wants {
		if !strings.Contains(e.Message, w) {
			h.t.Errorf("%s: error %q does not mention %q", method, e.Message, w)
		}
	}
	return e
}

func (h *daemonHarness) session(peer api.Peer) string {
	h.t.Helper()
	var r api.CreateSessionResult
	h.ok(peer, "sessions.create", nil, &r)
	if !strings.HasPrefix(r.SessionID, "ses_") {
		h.t.Fatalf("session id %q", r.SessionID)
	}
	return r.SessionID
}

func (h *daemonHarness) load(peer api.Peer, sid, mode string, names ...string) api.LoadResult {
	h.t.Helper()
	var r api.LoadResult
	h.ok(peer, "skills.load", api.LoadParams{SessionID: sid, Names: names, Mode: mode}, &r)
	return r
}

func activeNames(r api.LoadResult) []string {
	var out []string
	for _, a := range r.ActiveSkills {
		out = append(out, a.Name)
	}
	return out
}

// ---- tests ----

func TestDaemonReadBeforeLoad(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	sid := h.session(peerA)
	h.fails(peerA, "skills.read", api.ReadParams{SessionID: sid, Path: "SKILL.md"}, api.KindInvalidParams, "skills.load")
	h.fails(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.py"}, api.KindInvalidParams, "skills.load")
	h.load(peerA, sid, "", "hello")
	// A skill that is indexed but not loaded in this session is refused too.
	h.fails(peerA, "skills.read", api.ReadParams{SessionID: sid, Skill: "other", Path: "SKILL.md"}, api.KindInvalidParams, "not loaded")

	var rr api.ReadResult
	h.ok(peerA, "skills.read", api.ReadParams{SessionID: sid, Path: "references/a.md"}, &rr)
	if rr.Skill != "hello" || rr.Content != "reference A\n" || rr.Encoding != "utf-8" || rr.Size != 12 {
		t.Errorf("read result %+v", rr)
	}
	for _, p := range []string{"../other/SKILL.md", "/etc/passwd", "references/../../other/SKILL.md"} {
		h.fails(peerA, "skills.read", api.ReadParams{SessionID: sid, Path: p}, api.KindInvalidParams)
	}
	h.fails(peerA, "skills.read", api.ReadParams{SessionID: sid, Path: "references/missing.md"}, api.KindNotFound)

	// Reads are audited: served and refused alike.
	reads := h.audit.Events(audit.EventSkillRead)
	if len(reads) != 5 {
		t.Fatalf("%d read records, want 5", len(reads))
	}
	if r := reads[0]; r.Outcome != audit.OutcomeOK || r.Read.SHA256 == "" || r.Read.Bytes != 12 || r.Peer.UID != peerA.UID || r.Skill.Digest == "" || r.Method != "skills.read" {
		t.Errorf("served read record %+v %+v", r, r.Read)
	}
	if r := reads[1]; r.Outcome != audit.OutcomeRefused || r.Error == "" || r.Read.Path != "../other/SKILL.md" {
		t.Errorf("refused read record %+v %+v", r, r.Read)
	}
}

func TestDaemonLoadReplaceAddCap(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills()) // max_active_skills = 3
	sid := h.session(peerA)

	if got := activeNames(h.load(peerA, sid, "", "hello")); strings.Join(got, ",") != "hello" {
		t.Fatalf("load: %v", got)
	}
	r := h.load(peerA, sid, "replace", "other")
	if got := activeNames(r); strings.Join(got, ",") != "other" {
		t.Fatalf("replace: %v", got)
	}
	if len(r.Hints) != 1 || !strings.Contains(r.Hints[0], `requires "hello"`) {
		t.Errorf("requires hint: %q", r.Hints)
	}
	r = h.load(peerA, sid, "add", "hello")
	if got := activeNames(r); strings.Join(got, ",") != "other,hello" {
		t.Fatalf("add: %v", got)
	}
	if len(r.Hints) != 0 {
		t.Errorf("hints with requires loaded: %q", r.Hints)
	}
	// Adding one already loaded moves it to the end (most recent).
	if got := activeNames(h.load(peerA, sid, "add", "other")); strings.Join(got, ",") != "hello,other" {
		t.Fatalf("re-add: %v", got)
	}
	if got := activeNames(h.load(peerA, sid, "add", "third")); strings.Join(got, ",") != "hello,other,third" {
		t.Fatalf("add third: %v", got)
	}
	// Over the cap: refused, and the session is unchanged.
	h.fails(peerA, "skills.load", api.LoadParams{SessionID: sid, Names: []string{"fourth"}, Mode: "add"}, api.KindLimitExceeded, "limit is 3", "skills.unload")
	h.fails(peerA, "skills.load", api.LoadParams{SessionID: sid, Names: []string{"hello", "other", "third", "fourth"}}, api.KindLimitExceeded)
	var ins api.InstructionsResult
	h.ok(peerA, "sessions.instructions", api.SessionParams{SessionID: sid}, &ins)
	if strings.Contains(ins.ActiveSkills, `name="fourth"`) || !strings.Contains(ins.ActiveSkills, `name="third"`) {
		t.Errorf("cap refusal changed the session: %s", ins.ActiveSkills)
	}
	// Unknown names, bad names, bad modes, nothing to load.
	h.fails(peerA, "skills.load", api.LoadParams{SessionID: sid, Names: []string{"nope"}}, api.KindNotFound, `"nope"`, "skills.list")
	h.fails(peerA, "skills.load", api.LoadParams{SessionID: sid, Names: []string{"Bad Name"}}, api.KindInvalidParams)
	h.fails(peerA, "skills.load", api.LoadParams{SessionID: sid, Names: []string{"hello"}, Mode: "merge"}, api.KindInvalidParams, "replace")
	h.fails(peerA, "skills.load", api.LoadParams{SessionID: sid}, api.KindInvalidParams)
	h.fails(peerA, "skills.load", map[string]any{"session_id": sid, "names": []string{"hello"}, "nmae": 1}, api.KindInvalidParams, "nmae")

	// Unload one, unload all.
	var ur api.LoadResult
	h.ok(peerA, "skills.unload", api.UnloadParams{SessionID: sid, Names: []string{"other"}}, &ur)
	if got := activeNames(ur); strings.Join(got, ",") != "hello,third" {
		t.Fatalf("unload: %v", got)
	}
	h.fails(peerA, "skills.unload", api.UnloadParams{SessionID: sid, Names: []string{"other"}}, api.KindNotFound)
	h.ok(peerA, "skills.unload", api.UnloadParams{SessionID: sid, All: true}, &ur)
	if len(ur.ActiveSkills) != 0 {
		t.Fatalf("unload all: %v", activeNames(ur))
	}
	if n := len(h.audit.Events(audit.EventSkillLoad)); n != 5 {
		t.Errorf("%d load records, want 5 (one per skill loaded)", n)
	}
	if n := len(h.audit.Events(audit.EventSkillUnload)); n != 3 {
		t.Errorf("%d unload records, want 3", n)
	}
}

func TestDaemonDigestChangedSinceLoad(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	sid := h.session(peerA)
	h.load(peerA, sid, "", "hello")
	h.ok(peerA, "skills.read", api.ReadParams{SessionID: sid, Path: "references/a.md"}, nil)

	// The skill's files change on disk and the registry re-indexes it.
	sk, _ := h.index.Get("hello")
	if err := os.WriteFile(filepath.Join(sk.Dir, "scripts/run.py"), []byte("import os; os.system('evil')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := *sk
	dg, err := skills.Digest(sk.Dir)
	if err != nil || dg == sk.Digest {
		t.Fatalf("digest did not change: %v", err)
	}
	changed.Digest = dg
	h.index.Put(&changed)

	h.fails(peerA, "skills.read", api.ReadParams{SessionID: sid, Path: "references/a.md"}, api.KindInvalidParams, "changed on disk", "skills.load")
	h.fails(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.py"}, api.KindInvalidParams, "changed on disk")
	if n := len(h.rt.Jobs()); n != 0 {
		t.Fatalf("a changed skill ran %d times", n)
	}
	var cr api.CheckToolResult
	h.ok(peerA, "tools.check", api.CheckToolParams{SessionID: sid, Tool: "skills.read"}, &cr)
	if cr.Decision != "deny" || !strings.Contains(cr.Reason, "changed on disk") {
		t.Errorf("tools.check with a changed skill: %+v", cr)
	}
	var ins api.InstructionsResult
	h.ok(peerA, "sessions.instructions", api.SessionParams{SessionID: sid}, &ins)
	if !strings.Contains(ins.Instructions, `"hello" changed on disk`) {
		t.Errorf("instructions do not flag the changed skill:\n%s", ins.Instructions)
	}

	// Loading again pins the new version.
	r := h.load(peerA, sid, "", "hello")
	if r.ActiveSkills[0].Digest != dg {
		t.Fatalf("reload digest %s, want %s", r.ActiveSkills[0].Digest, dg)
	}
	h.ok(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.py"}, nil)

	// A loaded skill that disappears from the index.
	h.index.Remove("hello")
	h.fails(peerA, "skills.read", api.ReadParams{SessionID: sid, Path: "references/a.md"}, api.KindNotFound, "unload")
	h.ok(peerA, "tools.check", api.CheckToolParams{SessionID: sid, Tool: "skills.read"}, &cr)
	if cr.Decision != "deny" {
		t.Errorf("tools.check with a vanished skill: %+v", cr)
	}
}

func TestDaemonConfirmationBinding(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	sid := h.session(peerA)
	h.load(peerA, sid, "", "guarded-deploy")
	params := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"web", "staging"}}, Path: "scripts/deploy.sh"}

	e := h.fails(peerA, "skills.run_script", params, api.KindConfirmationRequired, "confirmation_id")
	id, _ := e.Data["confirmation_id"].(string)
	digest, _ := e.Data["digest"].(string)
	if !strings.HasPrefix(id, "cnf_") || !strings.HasPrefix(digest, "sha256:") || !strings.Contains(fmt.Sprint(e.Data["rule"]), "needs-approval") {
		t.Fatalf("confirmation data %v", e.Data)
	}
	if n := len(h.rt.Jobs()); n != 0 {
		t.Fatalf("ran before approval")
	}
	// Asking again before a decision returns the same request.
	e2 := h.fails(peerA, "skills.run_script", params, api.KindConfirmationRequired)
	if e2.Data["confirmation_id"] != id {
		t.Errorf("repeat asked again: %v vs %s", e2.Data["confirmation_id"], id)
	}
	// Pending: using the id says it is still waiting.
	withID := params
	withID.ConfirmationID = id
	h.fails(peerA, "skills.run_script", withID, api.KindConfirmationRequired, "still waiting")

	// The requester sees its own request; a stranger sees nothing.
	var lst struct {
		Confirmations []api.Confirmation `json:"confirmations"`
	}
	h.ok(peerA, "confirmations.list", api.ListConfirmationsParams{}, &lst)
	if len(lst.Confirmations) != 1 || lst.Confirmations[0].ID != id || lst.Confirmations[0].Details["script"] != "scripts/deploy.sh" {
		t.Errorf("requester's list: %+v", lst.Confirmations)
	}
	h.ok(peerB, "confirmations.list", api.ListConfirmationsParams{}, &lst)
	if len(lst.Confirmations) != 0 {
		t.Errorf("another uid sees %d confirmations", len(lst.Confirmations))
	}

	// Non-approvers cannot approve, not even their own request.
	h.fails(peerA, "confirmations.approve", api.ConfirmationIDParams{ID: id}, api.KindDenied, "uid 1000 is not an approver")
	h.fails(peerB, "confirmations.approve", api.ConfirmationIDParams{ID: id}, api.KindDenied)
	h.fails(peerB, "confirmations.deny", api.ConfirmationIDParams{ID: id}, api.KindDenied)
	refusals := 0
	for _, r := range h.audit.Events(audit.EventConfirmApprove) {
		if r.Outcome == audit.OutcomeRefused {
			refusals++
		}
	}
	if refusals != 2 {
		t.Errorf("%d refused approvals audited, want 2", refusals)
	}

	// An approver named by uid sees it and approves it.
	h.ok(peerApprover, "confirmations.list", api.ListConfirmationsParams{State: "pending"}, &lst)
	if len(lst.Confirmations) != 1 {
		t.Fatalf("approver's list: %+v", lst.Confirmations)
	}
	var c api.Confirmation
	h.ok(peerApprover, "confirmations.approve", api.ConfirmationIDParams{ID: id}, &c)
	if c.State != "approved" || c.DecidedBy == nil || c.DecidedBy.UID != peerApprover.UID {
		t.Fatalf("approve: %+v", c)
	}

	// The id is bound to exactly the approved call: other args, env,
	// limits, script or session are refused and leave the approval intact.
	other := withID
	other.Args = []string{"web", "production"}
	h.fails(peerA, "skills.run_script", other, api.KindInvalidParams, "different request")
	other = withID
	other.Env = map[string]string{"DEBUG": "1"}
	h.fails(peerA, "skills.run_script", other, api.KindInvalidParams, "different request")
	other = withID
	other.TimeoutMS = 1000
	h.fails(peerA, "skills.run_script", other, api.KindInvalidParams, "different request")
	sidB := h.session(peerA)
	h.load(peerA, sidB, "", "guarded-deploy")
	other = withID
	other.SessionID = sidB
	h.fails(peerA, "skills.run_script", other, api.KindNotFound)
	if n := len(h.rt.Jobs()); n != 0 {
		t.Fatalf("a mismatched call ran")
	}

	// The approved call runs once.
	var res api.RunScriptResult
	h.ok(peerA, "skills.run_script", withID, &res)
	if res.ExitCode != 0 || res.Reason != "exit" {
		t.Fatalf("approved run: %+v", res)
	}
	starts := h.audit.Events(audit.EventRunStart)
	if len(starts) != 1 || starts[0].Run.ConfirmationID != id || starts[0].Run.Digest != digest {
		t.Errorf("run.start does not name the approval: %+v", starts)
	}
	h.fails(peerA, "skills.run_script", withID, api.KindInvalidParams, "already used")
	if n := len(h.rt.Jobs()); n != 1 {
		t.Fatalf("%d runs, want exactly 1", n)
	}

	// A denied request cannot run.
	e = h.fails(peerA, "skills.run_script", params, api.KindConfirmationRequired)
	id2 := e.Data["confirmation_id"].(string)
	if id2 == id {
		t.Fatal("a used confirmation was handed out again")
	}
	h.ok(peerRoot, "confirmations.deny", api.ConfirmationIDParams{ID: id2}, &c)
	withID.ConfirmationID = id2
	h.fails(peerA, "skills.run_script", withID, api.KindDenied, "denied")
}

func TestDaemonSessionsInvisibleAcrossUIDs(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	sid := h.session(peerA)
	h.load(peerA, sid, "", "hello")

	for _, tc := range []struct {
		method string
		params any
	}{
		{"sessions.instructions", api.SessionParams{SessionID: sid}},
		{"skills.list", api.ListSkillsParams{SessionID: sid}},
		{"skills.load", api.LoadParams{SessionID: sid, Names: []string{"other"}}},
		{"skills.unload", api.UnloadParams{SessionID: sid, All: true}},
		{"skills.read", api.ReadParams{SessionID: sid, Path: "SKILL.md"}},
		{"skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.py"}},
		{"tools.check", api.CheckToolParams{SessionID: sid, Tool: "Read"}},
		{"sessions.close", api.SessionParams{SessionID: sid}},
	} {
		// Not "forbidden": another uid cannot even tell the session exists.
		e := h.fails(peerB, tc.method, tc.params, api.KindNotFound, sid)
		if strings.Contains(e.Message, "1000") {
			t.Errorf("%s leaks the owner: %s", tc.method, e.Message)
		}
		// Root is not special either: sessions belong to their uid.
		h.fails(peerRoot, tc.method, tc.params, api.KindNotFound)
	}
	// The owner's session is untouched.
	var ins api.InstructionsResult
	h.ok(peerA, "sessions.instructions", api.SessionParams{SessionID: sid}, &ins)
	if !strings.Contains(ins.ActiveSkills, `name="hello"`) {
		t.Errorf("owner's session lost its skill: %s", ins.ActiveSkills)
	}
	if n := len(h.rt.Jobs()); n != 0 {
		t.Errorf("another uid ran a script in the session")
	}
	h.ok(peerA, "sessions.close", api.SessionParams{SessionID: sid}, nil)
	h.fails(peerA, "sessions.instructions", api.SessionParams{SessionID: sid}, api.KindNotFound, "sessions.create")
}

func TestDaemonInstructions(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	sid := h.session(peerA)
	h.load(peerA, sid, "", "other", "hello")
	var ins api.InstructionsResult
	h.ok(peerA, "sessions.instructions", api.SessionParams{SessionID: sid}, &ins)
	for _, want := range []string{"skills.load", "<available_skills>", "</available_skills>", "<active_skills>", "</active_skills>", "Use scripts/run.py for hello."} {
		if !strings.Contains(ins.Instructions, want) {
			t.Errorf("instructions lack %q:\n%s", want, ins.Instructions)
		}
	}
	// Bodies come in load order.
	if i, j := strings.Index(ins.ActiveSkills, `name="other"`), strings.Index(ins.ActiveSkills, `name="hello"`); i < 0 || j < 0 || i > j {
		t.Errorf("active skills not in load order:\n%s", ins.ActiveSkills)
	}
}

// toolsConfig exercises policy matching and allowed-tools narrowing.
const toolsConfig = `
daemon { %s }
policy "zz-deny-push" {
  skills = ["*"]
  deny   = ["Bash(git push:*)"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "Read", "Bash(git:*)", "Write"]
}
policy "aa-confirm-write" {
  skills  = ["writer*"]
  confirm = ["Write"]
}
`

// toolsConfigReversed is toolsConfig with the rules in the opposite order.
const toolsConfigReversed = `
daemon { %s }
policy "aa-confirm-write" {
  skills  = ["writer*"]
  confirm = ["Write"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "Read", "Bash(git:*)", "Write"]
}
policy "zz-deny-push" {
  skills = ["*"]
  deny   = ["Bash(git push:*)"]
}
`

func toolSkills() []servicetest.SkillSpec {
	return []servicetest.SkillSpec{
		{Name: "gitter"}, // declares no allowed-tools
		{Name: "reader", Allowed: []string{"Read", "skills.read"}},
		{Name: "writer", Allowed: []string{"Write", "Bash(git push:*)"}},
		{Name: "writer-b"}, // also needs confirmation for Write, lists nothing
	}
}

func TestDaemonToolsCheck(t *testing.T) {
	type check struct {
		tool, input string
		want        string // decision
		rule        string // substring of the rule
	}
	cases := []struct {
		name   string
		mode   string
		active []string
		checks []check
	}{
		{"no skills active", "", nil, []check{
			{"Bash", `{"command":"rm -rf /"}`, "allow", "no skills are active"},
		}},
		{"policy alone", "", []string{"gitter"}, []check{
			{"Bash", `{"command":"git status"}`, "allow", `policy "default"`},
			{"Bash", `{"command":"git push origin main"}`, "deny", `policy "zz-deny-push"`},
			{"Bash", `{"command":"curl example.com"}`, "deny", "default deny"},
			{"Read", ``, "allow", `policy "default"`},
			{"Write", ``, "allow", `policy "default"`},
			{"WebFetch", ``, "deny", "default deny"},
		}},
		{"allowed-tools narrows (restrict)", "", []string{"reader"}, []check{
			{"Read", ``, "allow", `policy "default"`},
			{"skills.read", ``, "allow", `policy "default"`},
			{"Bash", `{"command":"git status"}`, "deny", `allowed-tools of skill "reader"`},
			{"skills.run_script", ``, "deny", `allowed-tools of skill "reader"`},
			{"Write", ``, "deny", `allowed-tools of skill "reader"`},
		}},
		{"strictest of the active skills", "", []string{"gitter", "reader"}, []check{
			{"Read", ``, "allow", ""},
			{"Bash", `{"command":"git status"}`, "deny", `allowed-tools of skill "reader"`},
		}},
		{"confirm beats allow, deny beats skill lists", "", []string{"writer"}, []check{
			{"Write", ``, "confirm", `policy "aa-confirm-write"`},
			{"Bash", `{"command":"git push origin main"}`, "deny", `policy "zz-deny-push"`},
			{"Read", ``, "deny", `allowed-tools of skill "writer"`},
		}},
		{"confirm with another skill active", "", []string{"gitter", "writer"}, []check{
			{"Write", ``, "confirm", `policy "aa-confirm-write"`},
		}},
		{"preapprove", `tool_mode = "preapprove"`, []string{"writer"}, []check{
			// Listed, but a skill cannot waive the policy's confirmation.
			{"Write", ``, "confirm", `policy "aa-confirm-write"`},
			{"Read", ``, "allow", `policy "default"`},
			{"Bash", `{"command":"git push origin main"}`, "deny", `policy "zz-deny-push"`},
		}},
		{"preapprove only for the skill that lists the tool", `tool_mode = "preapprove"`, []string{"writer", "writer-b"}, []check{
			{"Write", ``, "confirm", `policy "aa-confirm-write"`},
		}},
		{"preapprove: tools outside the list keep the policy's answer", `tool_mode = "preapprove"`, []string{"reader"}, []check{
			{"Write", ``, "allow", `policy "default"`},
			{"Bash", `{"command":"git push origin main"}`, "deny", `policy "zz-deny-push"`},
		}},
	}
	for _, order := range []struct{ name, config string }{{"file order", toolsConfig}, {"reversed", toolsConfigReversed}} {
		for _, tc := range cases {
			t.Run(order.name+"/"+tc.name, func(t *testing.T) {
				h := newHarness(t, fmt.Sprintf(order.config, tc.mode), toolSkills())
				sid := h.session(peerA)
				if len(tc.active) > 0 {
					h.load(peerA, sid, "replace", tc.active...)
				}
				for _, c := range tc.checks {
					p := api.CheckToolParams{SessionID: sid, Tool: c.tool}
					if c.input != "" {
						p.Input = json.RawMessage(c.input)
					}
					var r api.CheckToolResult
					h.ok(peerA, "tools.check", p, &r)
					if r.Decision != c.want || !strings.Contains(r.Rule, c.rule) {
						t.Errorf("%s %s: got %s by %q (%s), want %s by %q", c.tool, c.input, r.Decision, r.Rule, r.Reason, c.want, c.rule)
					}
				}
			})
		}
	}
	h := newHarness(t, fmt.Sprintf(toolsConfig, ""), toolSkills())
	sid := h.session(peerA)
	h.fails(peerA, "tools.check", api.CheckToolParams{SessionID: sid}, api.KindInvalidParams, "tool is required")
	h.load(peerA, sid, "", "gitter")
	h.ok(peerA, "tools.check", api.CheckToolParams{SessionID: sid, Tool: "Read"}, nil)
	if recs := h.audit.Events(audit.EventDecision); len(recs) != 1 || recs[0].Decision.Tool != "Read" || recs[0].Decision.Effect != "allow" || recs[0].SessionID != sid {
		t.Errorf("decision not audited: %+v", recs)
	}
}

func TestDaemonRunScriptJobAndAudit(t *testing.T) {
	cfg := testConfig + `
policy "slow" {
  skills = ["hello"]
  limits {
    timeout = "20s"
    memory  = "128MiB"
  }
}
`
	h := newHarness(t, cfg, defaultSkills())
	sid := h.session(peerA)
	h.load(peerA, sid, "", "hello")
	h.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{
			Stdout:  []byte("out"),
			Stderr:  []byte("err!"),
			Outputs: []runtime.OutputFile{{Path: "r.txt", Size: 2, SHA256: "abc", Data: []byte("ok")}},
			Summary: outcome.Summary{ExitCode: 3, Reason: runtime.ReasonExit, Runtime: "fake"},
		}, nil
	}
	var res api.RunScriptResult
	h.ok(peerA, "skills.run_script", api.RunScriptParams{
		RunInputs: api.RunInputs{SessionID: sid, Args: []string{"a b", "--x"}, Env: map[string]string{"MODE": "fast"}, Stdin: "input", TimeoutMS: 5000, Files: []api.File{api.NewFile("in.txt", []byte("data"))}},
		Path:      "scripts/run.py",
	}, &res)
	if res.ExitCode != 3 || res.Stdout != "out" || res.Stderr != "err!" || len(res.Outputs) != 1 || res.Outputs[0].Content == "" || res.Image != "python" {
		t.Errorf("result %+v", res)
	}
	jobs := h.rt.Jobs()
	if len(jobs) != 1 {
		t.Fatalf("%d jobs", len(jobs))
	}
	j := jobs[0]
	if want := "python3 /skill/scripts/run.py a b --x"; strings.Join(j.Invocation.Args, " ") != want {
		t.Errorf("argv %q, want %q", j.Invocation.Args, want)
	}
	if j.Limits().Timeout != 5*time.Second || j.Limits().MemoryBytes != 128<<20 || j.Sandbox.Network {
		t.Errorf("limits %+v network %v", j.Limits(), j.Sandbox.Network)
	}
	if strings.Join(j.Invocation.Env, " ") != "MODE=fast" || string(j.Invocation.Stdin) != "input" || len(j.Invocation.Files) != 1 || j.Invocation.Files[0].Name != "in.txt" {
		t.Errorf("job env %q stdin %q files %+v", j.Invocation.Env, j.Invocation.Stdin, j.Invocation.Files)
	}
	if !strings.HasPrefix(j.Sandbox.ID, runtime.IDPrefix) || j.Sandbox.RootFS != "/var/lib/fake/python" {
		t.Errorf("job id %q rootfs %q", j.Sandbox.ID, j.Sandbox.RootFS)
	}

	starts, ends := h.audit.Events(audit.EventRunStart), h.audit.Events(audit.EventRunEnd)
	if len(starts) != 1 || len(ends) != 1 {
		t.Fatalf("%d starts, %d ends", len(starts), len(ends))
	}
	for _, r := range []audit.Record{starts[0], ends[0]} {
		ri := r.Run
		if r.SessionID != sid || r.Peer.UID != peerA.UID || r.Peer.PID != peerA.PID || r.Peer.Process != "host-a" ||
			r.Skill.Name != "hello" || !strings.HasPrefix(r.Skill.Digest, "sha256:") || r.Method != "skills.run_script" {
			t.Errorf("%s: who/what %+v", r.Event, r)
		}
		if ri.RunID != res.RunID || ri.Script != "scripts/run.py" || len(ri.ScriptSHA256) != 64 || strings.Join(ri.Args, "|") != "a b|--x" ||
			strings.Join(ri.EnvNames, ",") != "MODE" || ri.Runtime != "fake" || ri.RuntimeVersion != "fake-1.0" || ri.Image != "python" ||
			ri.ImageDigest == "" || ri.Limits.Timeout != 5*time.Second || ri.Network || ri.Digest == "" ||
			ri.StdinBytes != 5 || len(ri.Inputs) != 1 {
			t.Errorf("%s: run info %+v", r.Event, ri)
		}
		if !strings.Contains(r.Detail["limit_rules"], `policy "slow"`) || !strings.Contains(r.Detail["interpreter_rule"], "python") {
			t.Errorf("%s: detail %v", r.Event, r.Detail)
		}
	}
	if starts[0].Run.ExitCode != nil || starts[0].Seq > ends[0].Seq {
		t.Errorf("start record %+v", starts[0].Run)
	}
	e := ends[0].Run
	if e.ExitCode == nil || *e.ExitCode != 3 || e.Reason != "exit" || e.StdoutBytes != 3 || e.StderrBytes != 4 ||
		e.StdoutSHA256 != runner.SHA256Hex([]byte("out")) || len(e.Outputs) != 1 || e.Outputs[0].Path != "r.txt" || ends[0].Outcome != "exit" {
		t.Errorf("end record %+v", e)
	}

	// Refusals before anything runs.
	for _, tc := range []struct {
		p    api.RunScriptParams
		kind string
		want string
	}{
		{api.RunScriptParams{Path: "SKILL.md"}, api.KindInvalidParams, "no interpreter"},
		{api.RunScriptParams{Path: "scripts/../SKILL.md"}, api.KindInvalidParams, ".."},
		{api.RunScriptParams{Path: "scripts/missing.py"}, api.KindNotFound, "not found"},
		{api.RunScriptParams{RunInputs: api.RunInputs{Env: map[string]string{"LD_PRELOAD": "/x.so"}}, Path: "scripts/run.py"}, api.KindInvalidParams, "LD_PRELOAD"},
		{api.RunScriptParams{RunInputs: api.RunInputs{Files: []api.File{api.NewFile("../x", nil)}}, Path: "scripts/run.py"}, api.KindInvalidParams, "inside the working directory"},
		{api.RunScriptParams{Path: "scripts/run.py", Network: true}, api.KindDenied, "network"},
		{api.RunScriptParams{RunInputs: api.RunInputs{TimeoutMS: -1}, Path: "scripts/run.py"}, api.KindInvalidParams, "timeout_ms"},
	} {
		tc.p.SessionID = sid
		h.fails(peerA, "skills.run_script", tc.p, tc.kind, tc.want)
	}
	if n := len(h.rt.Jobs()); n != 1 {
		t.Errorf("refused calls ran: %d jobs", n)
	}
}

func TestDaemonRunRefusedWhenAuditFails(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	sid := h.session(peerA)
	h.load(peerA, sid, "", "hello")
	h.audit.Fail(errors.New("no space left on device"))
	h.fails(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.py"}, api.KindUnavailable, "audit log cannot be written", "no space left", "runs included")
	h.fails(peerA, "skills.read", api.ReadParams{SessionID: sid, Path: "SKILL.md"}, api.KindUnavailable)
	if n := len(h.rt.Jobs()); n != 0 {
		t.Fatalf("ran without an audit log")
	}
	h.audit.Fail(nil)
	h.ok(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.py"}, nil)

	// The run.start record is written before the sandbox starts: if it
	// fails the runtime is never called; if the end record fails the
	// result is withheld.
	h.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		h.audit.Fail(errors.New("disk died"))
		return &runtime.Result{Stdout: []byte("secret"), Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	h.fails(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.py"}, api.KindUnavailable, "disk died")
}

func TestDaemonApprovalNotBurnedWhenAuditDown(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	sid := h.session(peerA)
	h.load(peerA, sid, "", "guarded-deploy")
	p := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"web", "staging"}}, Path: "scripts/deploy.sh"}
	e := h.fails(peerA, "skills.run_script", p, api.KindConfirmationRequired)
	p.ConfirmationID = e.Data["confirmation_id"].(string)
	h.ok(peerRoot, "confirmations.approve", api.ConfirmationIDParams{ID: p.ConfirmationID}, nil)

	// The decision record goes first, so an outage refuses the call before
	// the approval is looked at; once the log is back the approval works.
	h.audit.Fail(errors.New("read-only file system"))
	h.fails(peerA, "skills.run_script", p, api.KindUnavailable)
	h.audit.Fail(nil)
	h.ok(peerA, "skills.run_script", p, nil)
}

func TestDaemonOverSocket(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	path := filepath.Join(t.TempDir(), "d.sock")
	ln, err := sockfile.Listen(path, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.d.Server().Serve(ctx, ln) }()
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		h.d.Server().Shutdown(sctx)
		<-done
	}()

	cl, err := client.Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sid, err := cl.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"hello"}}); err != nil {
		t.Fatal(err)
	}
	res, err := cl.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"x"}}, Path: "scripts/run.sh"})
	if err != nil || !strings.Contains(res.Stdout, "bash /skill/scripts/run.sh x") {
		t.Fatalf("run over the socket: %+v %v", res, err)
	}
	// The peer is the kernel's: this process.
	if recs := h.audit.Events(audit.EventSessionCreate); len(recs) != 1 || recs[0].Peer.UID != uint32(os.Getuid()) || recs[0].Peer.PID != int32(os.Getpid()) {
		t.Errorf("session.create peer %+v", recs)
	}

	// Protocol errors on a raw connection that keeps working afterwards.
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	roundTrip := func(line string) map[string]any {
		t.Helper()
		nc.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := nc.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(resp, &m); err != nil {
			t.Fatalf("response %q: %v", resp, err)
		}
		return m
	}
	code := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	if m := roundTrip(`{"jsonrpc":"2.0","id":1,"method":"sessions.create"`); code(m) != jsonrpc.CodeParseError {
		t.Errorf("malformed JSON: %v", m)
	}
	if m := roundTrip(`{"jsonrpc":"2.0","id":2,"method":"skills.lodd","params":{}}`); code(m) != jsonrpc.CodeMethodNotFound || !strings.Contains(fmt.Sprint(m["error"]), "skills.load") {
		t.Errorf("unknown method: %v", m)
	}
	if m := roundTrip(`{"jsonrpc":"2.0","id":3,"method":"skills.list","params":{"session_id":"` + sid + `"}}`); m["error"] != nil || m["result"] == nil {
		t.Errorf("connection unusable after errors: %v", m)
	}
}
