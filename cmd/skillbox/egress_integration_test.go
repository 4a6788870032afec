//go:build integration

package main

import (
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/core/audit"
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
if len(sys.argv) > 2:
    import os
    print("token:", os.environ.get("API_TOKEN"))
    print("secure:", get("https://example.com:%s/" % sys.argv[2]))
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
	secret := "tok-" + fmt.Sprint(os.Getpid()) + "-e2e-secret-value"
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") == "key "+secret {
			fmt.Fprint(w, "authorized")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer tlsSrv.Close()
	tu, _ := url.Parse(tlsSrv.URL)
	t.Setenv("SKILLBOX_E2E_TOKEN", secret)
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
			// The TLS test server's certificate is for example.com.
			runItWriteFile(t, hosts, "127.0.0.1 allowed.test denied.test example.com\n")
			upstreamCA := filepath.Join(f.base, "upstream-ca.pem")
			runItWriteFile(t, upstreamCA, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})))
			auditDir := filepath.Join(f.base, "audit")
			cfg := filepath.Join(f.base, "egress.hcl")
			runItWriteFile(t, cfg, fmt.Sprintf(`daemon {
  audit_dir = %q
}
egress {
  hosts_file       = %q
  upstream_ca_file = %q
}
secret "API_TOKEN" {
  from_env = "SKILLBOX_E2E_TOKEN"
  hosts    = ["example.com"]
  header   = "X-Api-Key: key %%s"
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
}
policy "api" {
  skills = ["egress-*"]
  egress = ["allowed.test:%s", "example.com:%s"]
}
policy "ask" {
  skills  = ["egress-guarded"]
  confirm = ["network"]
}
`, auditDir, hosts, upstreamCA, port, tu.Port()))

			o := runItExec(t, "run", "--runtime", rt, "--root", f.root, "--config", cfg, "egress-web", "scripts/fetch.py", "--", port, tu.Port())
			if o.code != 0 || !strings.Contains(o.stdout, "allowed: 200 hello-from-host") || !strings.Contains(o.stdout, "denied: 403") ||
				!strings.Contains(o.stdout, "direct: refused 101") || !strings.Contains(o.stdout, "secure: 200 authorized") ||
				!strings.Contains(o.stdout, "token: skillbox-secret-placeholder-API_TOKEN") || strings.Contains(o.stdout+o.stderr, secret) {
				t.Fatalf("egress run:\n%s", o)
			}
			files, _ := filepath.Glob(filepath.Join(auditDir, "*"))
			if len(files) == 0 {
				t.Fatalf("no audit files in %s", auditDir)
			}
			for _, p := range files {
				if raw, err := os.ReadFile(p); err == nil && strings.Contains(string(raw), secret) {
					t.Errorf("the secret's value is in the audit log %s", p)
				}
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
			if len(conns) != 3 {
				t.Fatalf("%d egress records, want 3: %+v", len(conns), conns)
			}
			// Attempts are recorded as their connections end: find them by name.
			byHost := map[string]*audit.Record{}
			for _, r := range conns {
				byHost[r.Egress.Host] = r
			}
			okRec, deniedRec, secRec := byHost["allowed.test"], byHost["denied.test"], byHost["example.com"]
			if okRec == nil || deniedRec == nil || secRec == nil {
				t.Fatalf("egress records %+v", conns)
			}
			if sec := secRec.Egress; sec.Host != "example.com" || !sec.Allowed || len(sec.Secrets) != 1 || sec.Secrets[0] != "API_TOKEN" {
				t.Errorf("secret attempt: %+v", sec)
			}
			ok, denied := okRec.Egress, deniedRec.Egress
			if ok.Host != "allowed.test" || !ok.Allowed || ok.Address != "127.0.0.1" || ok.Out == 0 || ok.In == 0 ||
				!strings.Contains(ok.Rule, `policy "api"`) || okRec.Outcome != audit.OutcomeOK || ok.RunID == "" {
				t.Errorf("allowed attempt: %+v outcome %s", ok, okRec.Outcome)
			}
			if denied.Allowed || denied.Rule != "none" || deniedRec.Outcome != audit.OutcomeDenied {
				t.Errorf("denied attempt: %+v outcome %s", denied, deniedRec.Outcome)
			}
			if end == nil || end.Run.EgressStats == nil || end.Run.EgressStats.Connections != 2 || len(end.Run.Egress) != 2 ||
				len(end.Run.EgressSecrets) != 1 ||
				end.Run.RunID != ok.RunID {
				t.Errorf("run.end egress: %+v", end)
			}

			// confirm = ["network"]: the run waits for an approver, and
			// what is asked names the destination.
			o = runItExec(t, "run", "--runtime", rt, "--root", f.root, "--config", cfg, "egress-guarded", "scripts/fetch.py", "--", port)
			if o.code == 0 || !strings.Contains(o.stderr, "allowed.test:"+port) || !strings.Contains(o.stderr, "confirm") || strings.Contains(o.stderr, secret) {
				t.Errorf("guarded egress run without confirmation:\n%s", o)
			}
		})
	}
}
