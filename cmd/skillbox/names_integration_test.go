//go:build integration

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

// namesItWho is the script both claimants of net-x carry: it says which
// skill it is, whether it got net-x's secret, and whether net-x's egress
// destination answers.
const namesItWho = `import os, sys, urllib.request
print("me:", WHO)
print("token:", os.environ.get("NET_X_TOKEN"))
try:
    with urllib.request.urlopen("http://api.net-x.test:%s/" % sys.argv[2], timeout=15) as r:
        print("egress:", r.status, r.read().decode())
except Exception as e:
    print("egress: failed", type(e).__name__)
`

// TestDaemonSkillNameCollision: a skill cannot take another's name,
// through the real daemon, socket and gVisor: in a copy of skills/testdata/collision/root,
// aa-helper declares "name: net-x" and sorts before the real net-x, whose
// policy gives it egress and a secret. skills.load net-x must load the real
// one, the impostor must run as aa-helper without net-x's egress or secret,
// and a name two directories claim (dup-x) is refused saying why.
func TestDaemonSkillNameCollision(t *testing.T) {
	needDaemon(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "net-x-upstream")
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)

	root, err := os.MkdirTemp("", "sbit-names-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if out, err := exec.Command("cp", "-a", filepath.Join(itRepo, "skills", "testdata", "collision", "root")+"/.", root).CombinedOutput(); err != nil {
		t.Fatalf("copying the collision tree: %v: %s", err, out)
	}
	for d, who := range map[string]string{"net-x": "the real net-x", "aa-helper": "the impostor"} {
		runItWriteFile(t, filepath.Join(root, d, "scripts", "who.py"), fmt.Sprintf("WHO = %q\n", who)+namesItWho)
	}
	if out, err := exec.Command("chmod", "-R", "a+rX", root).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v: %s", err, out)
	}

	d := newItDaemon(t, root)
	hosts := filepath.Join(d.base, "egress-hosts")
	runItWriteFile(t, hosts, "127.0.0.1 api.net-x.test\n")
	f, err := os.OpenFile(d.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `
egress { hosts_file = %q }
secret "NET_X_TOKEN" {
  from_env = "SKILLBOX_NAMES_IT_TOKEN"
  hosts    = ["api.net-x.test"]
}
policy "net-x" {
  skills = ["net-x"]
  egress = ["api.net-x.test:%s"]
}
`, hosts, u.Port())
	f.Close()
	t.Setenv("SKILLBOX_NAMES_IT_TOKEN", "net-x-secret-value")
	d.start()
	c := d.client()
	ctx := ctxT(t)

	run := func(name string) *api.RunScriptResult {
		t.Helper()
		sid := must[string](t, "sessions.create")(c.NewSession(ctx))
		lr := must[*api.LoadResult](t, "skills.load "+name)(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{name}}))
		if len(lr.ActiveSkills) != 1 || lr.ActiveSkills[0].Name != name || lr.ActiveSkills[0].RootDir != filepath.Join(root, name) {
			t.Errorf("skills.load %s: %+v, want the skill in %s", name, lr.ActiveSkills, filepath.Join(root, name))
		}
		res := must[*api.RunScriptResult](t, "run "+name)(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{
			RunInputs: api.RunInputs{SessionID: sid, Args: []string{"", u.Port()}},
			Path:      "scripts/who.py",
		}))
		t.Logf("%s: %q", name, res.Stdout)
		return res
	}

	res := run("net-x")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "me: the real net-x") ||
		!strings.Contains(res.Stdout, "token: skillbox-secret-placeholder-NET_X_TOKEN") ||
		!strings.Contains(res.Stdout, "egress: 200 net-x-upstream") {
		t.Errorf("net-x (the real one, with its policy): %+v", res)
	}
	res = run("aa-helper")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "me: the impostor") || !strings.Contains(res.Stdout, "token: None") ||
		!strings.Contains(res.Stdout, "egress: failed") {
		t.Errorf("aa-helper (the impostor) got some of net-x's policy: %+v", res)
	}

	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	_, err = c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"dup-x"}})
	if e := wantKind(t, "skills.load dup-x", err, api.KindDenied); e != nil {
		for _, want := range []string{`"dup-x" is claimed by 2`, "group-a/dup-x", "group-b/dup-x", "rename or remove"} {
			if !strings.Contains(e.Message, want) {
				t.Errorf("skills.load dup-x: %q does not say %q", e.Message, want)
			}
		}
	}
	list := must[[]api.SkillInfo](t, "skills.list")(c.ListSkills(ctx, api.Peer{}, api.ListSkillsParams{SessionID: sid}))
	for _, s := range list {
		if s.Name == "dup-x" || (s.Name == "net-x" && s.Location != filepath.Join(root, "net-x", "SKILL.md")) {
			t.Errorf("skills.list: %+v", s)
		}
	}
}
