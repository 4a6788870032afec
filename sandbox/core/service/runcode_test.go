package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/skills"
)

const codeConfig = `
daemon {
  approvers = ["4242"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "skills.run_code"]
  env    = ["MODE"]
}
policy "ask" {
  skills  = ["guarded"]
  confirm = ["skills.run_code"]
}
policy "no" {
  skills = ["denied"]
  deny   = ["skills.run_code"]
}
policy "no-shell" {
  skills = ["pdf"]
  deny   = ["skills.run_code(shell)"]
}
policy "tight" {
  skills = ["gif"]
  limits {
    memory = "128MiB"
  }
}
`

var codeSkills = []servicetest.SkillSpec{
	{Name: "gif", Files: map[string]string{"core/__init__.py": "", "core/gif.py": "def make(path): open(path, 'wb').write(b'GIF89a')\n"}},
	{Name: "pdf", Files: map[string]string{"lib/pdfutil.py": "def pages(): return 3\n"}},
}

func newCodeFixture(t *testing.T, withStores bool) *fixture {
	return newFixtureWith(t, withStores, codeConfig, codeSkills)
}

// session makes a session of owner with names loaded, in that order.
func (f *fixture) session(t *testing.T, names ...string) string {
	t.Helper()
	ctx := context.Background()
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	if _, err := f.svc.LoadSkills(ctx, owner, api.LoadParams{SessionID: sid, Names: names}); err != nil {
		t.Fatal(err)
	}
	return sid
}

func TestRunCodeMountsEveryActiveSkill(t *testing.T) {
	f := newCodeFixture(t, true)
	ctx := context.Background()
	sid := f.session(t, "gif", "pdf")
	code := "from core.gif import make\nmake('outputs/x.gif')\n"
	res, err := f.svc.RunCode(ctx, owner, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"a"}, Env: map[string]string{"MODE": "x"}}, Language: api.LanguagePython, Code: code})
	if err != nil {
		t.Fatal(err)
	}
	jobs := f.rt.Jobs()
	if len(jobs) != 1 {
		t.Fatalf("%d jobs", len(jobs))
	}
	job := jobs[0]
	if job.Sandbox.SkillDir != "" {
		t.Errorf("a code run mounts /skill: %s", job.Sandbox.SkillDir)
	}
	want := []runtime.SkillBind{{Source: f.sk["gif"].Dir, Target: "/skills/gif"}, {Source: f.sk["pdf"].Dir, Target: "/skills/pdf"}}
	if len(job.Sandbox.Skills) != 2 || job.Sandbox.Skills[0] != want[0] || job.Sandbox.Skills[1] != want[1] {
		t.Errorf("skills %+v, want %+v", job.Sandbox.Skills, want)
	}
	if job.Sandbox.Program == nil || job.Sandbox.Program.Name != "main.py" || string(job.Sandbox.Program.Data) != code {
		t.Errorf("program %+v", job.Sandbox.Program)
	}
	if got := strings.Join(job.Invocation.Args, " "); got != "python3 /skills/.code/main.py a" {
		t.Errorf("argv %q", got)
	}
	if got := strings.Join(job.Invocation.ModuleEnv, " "); got != "PYTHONPATH=/skills/gif:/skills/pdf" {
		t.Errorf("module env %q", got)
	}
	// The strictest limits of the skills apply.
	if job.Limits().MemoryBytes != 128<<20 {
		t.Errorf("memory %d, want the gif rule's 128MiB", job.Limits().MemoryBytes)
	}
	if res.Path != "/skills/.code/main.py" || len(res.Skills) != 2 || res.Skills[1] != (api.MountedSkill{Name: "pdf", Path: "/skills/pdf", Digest: f.sk["pdf"].Digest}) {
		t.Errorf("result %+v", res)
	}

	// One decision per skill, for the tool of its own.
	var tools []string
	for _, r := range f.audit.Events(audit.EventDecision) {
		tools = append(tools, r.Decision.Tool+"/"+r.Skill.Name+"/"+r.Decision.Effect)
	}
	if got := strings.Join(tools, " "); got != "skills.run_code/gif/allow skills.run_code/pdf/allow" {
		t.Errorf("decisions %s", got)
	}
	start, end := f.audit.Events(audit.EventRunStart), f.audit.Events(audit.EventRunEnd)
	if len(start) != 1 || len(end) != 1 {
		t.Fatalf("run records %d %d", len(start), len(end))
	}
	c := start[0].Run.Code
	if start[0].Skill != nil || len(start[0].Skills) != 2 || start[0].Skills[0].Path != "/skills/gif" || start[0].Skills[1].Digest != f.sk["pdf"].Digest {
		t.Errorf("run.start skills %+v %+v", start[0].Skill, start[0].Skills)
	}
	if c == nil || c.Language != "python" || c.Text != code || c.Size != int64(len(code)) || c.SHA256 != sha256hex(code) || c.Truncated {
		t.Errorf("run.start code %+v", c)
	}
	if start[0].Run.ScriptSHA256 != sha256hex(code) || start[0].Run.Script != "/skills/.code/main.py" {
		t.Errorf("run.start script %q %q", start[0].Run.Script, start[0].Run.ScriptSHA256)
	}
	if ec := end[0].Run.Code; ec == nil || ec.Text != "" || ec.SHA256 != c.SHA256 || len(end[0].Skills) != 2 {
		t.Errorf("run.end code %+v skills %+v", ec, end[0].Skills)
	}
}

func TestRunCodeLanguages(t *testing.T) {
	f := newCodeFixture(t, true)
	ctx := context.Background()
	sid := f.session(t, "gif")
	for _, tc := range []struct{ lang, argv, module string }{
		{api.LanguageShell, "bash /skills/.code/main.sh", ""},
		{api.LanguageNode, "node /skills/.code/main.js", "NODE_PATH=/skills/gif"},
	} {
		res, err := f.svc.RunCode(ctx, owner, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: tc.lang, Code: "echo"})
		if err != nil {
			t.Fatal(err)
		}
		jobs := f.rt.Jobs()
		job := jobs[len(jobs)-1]
		if got := strings.Join(job.Invocation.Args, " "); got != tc.argv || strings.Join(job.Invocation.ModuleEnv, " ") != tc.module || res.Image != tc.lang {
			t.Errorf("%s: argv %q module %q image %q", tc.lang, got, job.Invocation.ModuleEnv, res.Image)
		}
	}
}

func TestRunCodeRefusals(t *testing.T) {
	f := newCodeFixture(t, true)
	ctx := context.Background()
	empty := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	sid := f.session(t, "gif")
	both := f.session(t, "gif", "pdf")
	deniedToo := f.session(t, "gif", "denied")
	for _, tc := range []struct {
		name string
		p    api.RunCodeParams
		kind string
		want string
	}{
		{"no skill loaded", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: empty}, Language: "python", Code: "1"}, api.KindInvalidParams, "skills.load"},
		{"unknown language", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: "ruby", Code: "1"}, api.KindInvalidParams, `"python", "shell" or "node"`},
		{"empty code", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: "python"}, api.KindInvalidParams, "code is empty"},
		{"code too large", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: "python", Code: strings.Repeat("#", runtime.MaxProgramBytes+1)}, api.KindInvalidParams, "at most"},
		{"bad env", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid, Env: map[string]string{"PYTHONPATH": "/x"}}, Language: "python", Code: "1"}, api.KindInvalidParams, "PYTHONPATH"},
		{"env not allowed", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid, Env: map[string]string{"TAR_OPTIONS": "x"}}, Language: "python", Code: "1"}, api.KindInvalidParams, "TAR_OPTIONS"},
		{"env no rule lists", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid, Env: map[string]string{"MYTOOL_MODE": "x"}}, Language: "python", Code: "1"}, api.KindDenied, "MYTOOL_MODE"},
		{"negative timeout", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid, TimeoutMS: -1}, Language: "python", Code: "1"}, api.KindInvalidParams, "timeout_ms"},
		{"one skill denies", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: deniedToo}, Language: "python", Code: "1"}, api.KindDenied, `policy "no"`},
		{"denied by language", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: both}, Language: "shell", Code: "echo"}, api.KindDenied, `policy "no-shell"`},
		{"no such session", api.RunCodeParams{RunInputs: api.RunInputs{SessionID: "nope"}, Language: "python", Code: "1"}, api.KindNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.svc.RunCode(ctx, owner, tc.p)
			if api.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v (kind %s), want %s mentioning %q", err, api.KindOf(err), tc.kind, tc.want)
			}
		})
	}
	if n := len(f.rt.Jobs()); n != 0 {
		t.Errorf("%d refused runs ran", n)
	}

	// A skill that changed on disk since it was loaded is not mounted.
	if err := os.WriteFile(filepath.Join(f.sk["gif"].Dir, "core", "gif.py"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := servicetest.IndexSkill(t, f.sk["gif"].Dir, codeSkills[0], f.sk["gif"].Body)
	f.idx.Put(changed)
	if _, err := f.svc.RunCode(ctx, owner, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: "python", Code: "1"}); api.KindOf(err) != api.KindInvalidParams || !strings.Contains(err.Error(), "changed on disk") {
		t.Errorf("changed skill: %v", err)
	}
}

// The approval digest binds everything the run depends on: change any one
// of them and it is another run.
func TestRunCodeDigestBinding(t *testing.T) {
	f := newCodeFixture(t, false)
	eng := f.svc.Engine()
	type asked struct {
		service.RunRequest
		session string
	}
	base := func() asked {
		return asked{session: "ses_1", RunRequest: service.RunRequest{
			Code: &service.CodeRequest{Language: "python", Code: []byte("print(1)"), Skills: []*skills.Skill{f.sk["gif"], f.sk["pdf"]}},
			Args: []string{"a"}, Env: map[string]string{"LANG": "C.UTF-8"}, Stdin: []byte("in"),
			Files: []runtime.InputFile{{Name: "in.txt", Data: []byte("x")}},
		}}
	}
	digest := func(r asked) string {
		p, err := eng.PrepareWith(r.RunRequest, service.Origin{SessionID: r.session}, eng.Config().ForSkills(runner.RunSkillNames(r.RunRequest)...))
		if err != nil {
			t.Fatal(err)
		}
		return p.Digest()
	}
	ref := digest(base())
	if again := digest(base()); again != ref {
		t.Fatalf("same request, digests %s and %s", ref, again)
	}
	other := *f.sk["pdf"]
	other.Digest = "sha256:" + strings.Repeat("0", 64)
	for name, mut := range map[string]func(r *asked){
		"session":      func(r *asked) { r.session = "ses_2" },
		"skill digest": func(r *asked) { r.Code.Skills[1] = &other },
		"fewer skills": func(r *asked) { r.Code.Skills = r.Code.Skills[:1] },
		"skill order":  func(r *asked) { r.Code.Skills[0], r.Code.Skills[1] = r.Code.Skills[1], r.Code.Skills[0] },
		"language":     func(r *asked) { r.Code.Language = "shell" },
		"code":         func(r *asked) { r.Code.Code = []byte("print(2)") },
		"args":         func(r *asked) { r.Args = []string{"b"} },
		"env":          func(r *asked) { r.Env = map[string]string{"LANG": "C"} },
		"stdin":        func(r *asked) { r.Stdin = nil },
		"files":        func(r *asked) { r.Files[0].Data = []byte("y") },
		"limits":       func(r *asked) { r.Limits.Timeout = 1e9 },
	} {
		r := base()
		mut(&r)
		if d := digest(r); d == ref {
			t.Errorf("%s: the digest did not change", name)
		}
	}
}

func TestRunCodeConfirmation(t *testing.T) {
	f := newCodeFixture(t, true)
	ctx := context.Background()
	sid := f.session(t, "gif", "guarded")
	p := api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: "python", Code: "print('hi')"}
	_, err := f.svc.RunCode(ctx, owner, p)
	var cr *api.ConfirmationRequiredError
	if !asConfirmation(err, &cr) {
		t.Fatalf("want confirmation_required, got %v", err)
	}
	list := mustV(f.svc.ListConfirmations(ctx, approver, api.ListConfirmationsParams{SessionID: sid}))
	if len(list.Confirmations) != 1 {
		t.Fatalf("confirmations %+v", list)
	}
	d := list.Confirmations[0].Details
	if d["code"] != "print('hi')" || d["language"] != "python" || !strings.Contains(d["skills"], "gif@sha256:") || !strings.Contains(d["skills"], "guarded@sha256:") {
		t.Errorf("an approver sees %+v", d)
	}
	req := f.audit.Events(audit.EventConfirmRequest)
	if len(req) != 1 || req[0].Run.Code == nil || req[0].Run.Code.Text != p.Code || len(req[0].Skills) != 2 {
		t.Errorf("confirmation.request record %+v", req)
	}
	mustV(f.svc.ApproveConfirmation(ctx, approver, api.ConfirmationIDParams{ID: cr.ID}))

	// Other code is another run: the approval does not cover it.
	changed := p
	changed.Code, changed.ConfirmationID = "print('other')", cr.ID
	if _, err := f.svc.RunCode(ctx, owner, changed); api.KindOf(err) == "" || err == nil {
		t.Fatalf("changed code ran with the approval: %v", err)
	}
	if n := len(f.rt.Jobs()); n != 0 {
		t.Fatalf("%d runs before the approved one", n)
	}
	p.ConfirmationID = cr.ID
	if _, err := f.svc.RunCode(ctx, owner, p); err != nil {
		t.Fatalf("approved run: %v", err)
	}
	if _, err := f.svc.RunCode(ctx, owner, p); err == nil {
		t.Fatal("an approval was used twice")
	}
	if n := len(f.rt.Jobs()); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

func TestRunCodeAuditCap(t *testing.T) {
	f := newCodeFixture(t, true)
	ctx := context.Background()
	sid := f.session(t, "gif")
	code := "# é\n" + strings.Repeat("x = 1\n", audit.MaxCodeText/6+10)
	if _, err := f.svc.RunCode(ctx, owner, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: "python", Code: code}); err != nil {
		t.Fatal(err)
	}
	c := f.audit.Events(audit.EventRunStart)[0].Run.Code
	if !c.Truncated || len(c.Text) != audit.MaxCodeText || c.Text != code[:audit.MaxCodeText] || c.Size != int64(len(code)) || c.SHA256 != sha256hex(code) {
		t.Errorf("capped code: truncated %v, %d bytes kept of %d, sha %s", c.Truncated, len(c.Text), c.Size, c.SHA256)
	}
}

func TestInstructionsNameSkillMounts(t *testing.T) {
	f := newCodeFixture(t, true)
	sid := f.session(t, "gif", "pdf")
	res := mustV(f.svc.Instructions(context.Background(), owner, api.SessionParams{SessionID: sid}))
	if !strings.Contains(res.Instructions, "skills.run_code") || !strings.Contains(res.Instructions, "- gif: /skills/gif\n- pdf: /skills/pdf\n") {
		t.Errorf("instructions do not say where the skills are mounted:\n%s", res.Instructions)
	}
	if len(res.SkillMounts) != 2 || res.SkillMounts[0] != (api.MountedSkill{Name: "gif", Path: "/skills/gif", Digest: f.sk["gif"].Digest}) {
		t.Errorf("skill mounts %+v", res.SkillMounts)
	}
	empty := mustV(f.svc.CreateSession(context.Background(), owner, api.CreateSessionParams{})).SessionID
	if res := mustV(f.svc.Instructions(context.Background(), owner, api.SessionParams{SessionID: empty})); strings.Contains(res.Instructions, "/skills/") || res.SkillMounts != nil {
		t.Errorf("mounts without active skills: %+v", res)
	}
}

func asConfirmation(err error, cr **api.ConfirmationRequiredError) bool {
	return errors.As(err, cr)
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestRunCodeStreams(t *testing.T) {
	f := newCodeFixture(t, true)
	sid := f.session(t, "gif", "pdf")
	col := newCollector()
	res, err := f.svc.RunCode(api.WithEventSink(context.Background(), col.sink), owner, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid, Stream: true}, Language: "python", Code: "print(1)"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(col.methods(), " "); got != "run.started run.exited" {
		t.Fatalf("events %s", got)
	}
	if s := col.evs[0].(api.RunStartedEvent); s.RunID != res.RunID || s.Skill != "gif,pdf" || s.Path != "/skills/.code/main.py" || s.Image != "python" {
		t.Errorf("run.started %+v", s)
	}
}
