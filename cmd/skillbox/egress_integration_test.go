//go:build integration

package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/audit"
)

// egressItFetch is the skill script: one allowed and one denied request
// through the proxy, and one connection that ignores the proxy.
const egressItFetch = `import socket, sys, urllib.request, urllib.error
port = sys.argv[1]
def get(u):
    try:
        with urllib.request.urlopen(u, timeout=20) as r:
            return "%d %s" % (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "%d" % e.code
    except Exception as e:
        return repr(e)
print("allowed:", get("http://allowed.test:%s/x" % port))
print("denied:", get("http://denied.test:%s/x" % port))
try:
    socket.create_connection(("1.1.1.1", 443), timeout=10).close()
    print("direct: connected")
except OSError as e:
    print("direct: refused", e.errno)
`

// TestRunEgress runs a skill whose policy lists one destination through
// `skillbox run`, on both runtimes: the allowed name is reached through the
// proxy, the denied one is refused, and both attempts are in the audit with
// their rules; a rule asking for confirmation names the destination.
func TestRunEgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "hello-from-host")
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port := u.Port()
	for _, rt := range []string{"runsc", "runc"} {
		t.Run(rt, func(t *testing.T) {
			runItNeed(t, rt)
			runItNeedImage(t, "python")
			f := newRunFixture(t)
			for _, name := range []string{"egress-web", "egress-guarded"} {
				runItWriteFile(t, filepath.Join(f.root, name, "SKILL.md"), fmt.Sprintf("---\nname: %s\ndescription: Egress test skill. Use only in tests.\n---\n# %s\n", name, name))
				runItWriteFile(t, filepath.Join(f.root, name, "scripts", "fetch.py"), egressItFetch)
			}
			for _, p := range []string{f.root, filepath.Join(f.root, "egress-web"), filepath.Join(f.root, "egress-guarded")} {
				_ = os.Chmod(p, 0o755)
			}
			hosts := filepath.Join(f.base, "egress-hosts")
			runItWriteFile(t, hosts, "127.0.0.1 allowed.test denied.test\n")
			auditDir := filepath.Join(f.base, "audit")
			cfg := filepath.Join(f.base, "egress.hcl")
			runItWriteFile(t, cfg, fmt.Sprintf(`daemon {
  audit_dir = %q
}
egress {
  hosts_file = %q
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
}
policy "api" {
  skills = ["egress-*"]
  egress = ["allowed.test:%s"]
}
policy "ask" {
  skills  = ["egress-guarded"]
  confirm = ["network"]
}
`, auditDir, hosts, port))

			o := runItExec(t, "run", "--runtime", rt, "--root", f.root, "--config", cfg, "egress-web", "scripts/fetch.py", "--", port)
			if o.code != 0 || !strings.Contains(o.stdout, "allowed: 200 hello-from-host") || !strings.Contains(o.stdout, "denied: 403") ||
				!strings.Contains(o.stdout, "direct: refused 101") {
				t.Fatalf("egress run:\n%s", o)
			}
			var conns []*audit.Record
			var end *audit.Record
			if err := audit.Read(auditDir, func(r *audit.Record) error {
				switch r.Event {
				case audit.EventEgress:
					conns = append(conns, r)
				case audit.EventRunEnd:
					end = r
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(conns) != 2 {
				t.Fatalf("%d egress records, want 2: %+v", len(conns), conns)
			}
			ok, denied := conns[0].Egress, conns[1].Egress
			if ok.Host != "allowed.test" || !ok.Allowed || ok.Address != "127.0.0.1" || ok.Out == 0 || ok.In == 0 ||
				!strings.Contains(ok.Rule, `policy "api"`) || conns[0].Outcome != audit.OutcomeOK || ok.RunID == "" {
				t.Errorf("allowed attempt: %+v outcome %s", ok, conns[0].Outcome)
			}
			if denied.Host != "denied.test" || denied.Allowed || denied.Rule != "none" || conns[1].Outcome != audit.OutcomeDenied {
				t.Errorf("denied attempt: %+v outcome %s", denied, conns[1].Outcome)
			}
			if end == nil || end.Run.EgressStats == nil || end.Run.EgressStats.Connections != 1 || len(end.Run.Egress) != 1 ||
				end.Run.RunID != ok.RunID {
				t.Errorf("run.end egress: %+v", end)
			}

			// confirm = ["network"]: the run waits for an approver, and
			// what is asked names the destination.
			o = runItExec(t, "run", "--runtime", rt, "--root", f.root, "--config", cfg, "egress-guarded", "scripts/fetch.py", "--", port)
			if o.code == 0 || !strings.Contains(o.stderr, "allowed.test:"+port) || !strings.Contains(o.stderr, "confirm") {
				t.Errorf("guarded egress run without confirmation:\n%s", o)
			}
		})
	}
}
