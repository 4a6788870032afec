package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/doors/console"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
	"github.com/skillbox/skillbox/skills"
)

// The test process is the peer of every request (the kernel says so): the
// approver config names its uid for one service and another uid for the
// other, over the same stores and log.
const consoleConfig = `
daemon {
  approvers = ["APPROVER"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
  env    = ["TOKEN"]
}
policy "ask" {
  skills  = ["guarded"]
  confirm = ["skills.run_script"]
}
`

// fixture is a service pair over one set of stores and one audit log.
type fixture struct {
	approverSock, otherSock string // console sockets: the test's uid is / is not an approver
	svc                     *service.Service
	auditDir                string
	skills                  map[string]*skills.Skill
	me                      api.Peer
	root, lockFile          string // the skills' root; the lock file
	idx                     *servicetest.Index
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	me := api.Peer{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: int32(os.Getpid())}
	root := t.TempDir()
	idx := servicetest.NewIndex()
	f := &fixture{skills: map[string]*skills.Skill{}, me: me, auditDir: filepath.Join(t.TempDir(), "audit"),
		root: root, lockFile: filepath.Join(t.TempDir(), "skills.lock"), idx: idx}
	for _, name := range []string{"plain", "guarded"} {
		s := servicetest.MakeSkill(t, root, servicetest.SkillSpec{Name: name, Files: map[string]string{"scripts/run.sh": "echo hi\n"}})
		idx.Put(s)
		f.skills[name] = s
	}
	st, err := store.OpenStateDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log, err := audit.Open(f.auditDir, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	j := audit.NewJournal(log, nil)
	sessions := store.NewSessionStore(st, store.SessionOptions{})
	confirms := store.NewConfirmationStore(st, store.ConfirmationOptions{})
	eng := runner.New(runner.Options{Config: mustConfig(t, "1"), Images: &servicetest.Images{}, Runtime: &servicetest.Runtime{RunFunc: servicetest.RunByLastArg}, Audit: j, Pins: servicetest.LivePins{}})
	build := func(approver string) *service.Service {
		cfg := mustConfig(t, approver)
		cfg.Daemon.AuditDir, cfg.Skills.LockFile = f.auditDir, f.lockFile
		return service.New(service.Options{Config: cfg, Skills: idx, Engine: eng, Audit: j, Sessions: sessions, Confirmations: confirms})
	}
	f.svc = build(strconv.Itoa(os.Getuid()))
	other := build(strconv.Itoa(os.Getuid() + 1))
	f.approverSock, f.otherSock = serve(t, f.svc), serve(t, other)
	return f
}

func mustConfig(t *testing.T, approver string) *policy.Config {
	t.Helper()
	cfg, err := policy.Parse([]byte(strings.Replace(consoleConfig, "APPROVER", approver, 1)), "console.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serve serves svc's console API on a Unix socket made as the daemon makes
// it, and returns its path.
func serve(t *testing.T, svc console.Service) string {
	t.Helper()
	return serveWith(t, console.Server(svc, nil))
}

// serveWith serves srv on a console socket and returns its path.
func serveWith(t *testing.T, srv *http.Server) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := console.ConsoleSocket(filepath.Join(dir, "skillbox.sock"))
	ln, err := sockfile.Listen(sock, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return sock
}

// do sends one request over sock and decodes the JSON answer into out
// (nil: ignored); it returns the status and, for an error, its body.
func do(t *testing.T, sock, method, path string, out any) (int, *api.Error) {
	t.Helper()
	req, err := http.NewRequest(method, "http://console"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := unixClient(sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s %s: Content-Type %q: %s", method, path, resp.Header.Get("Content-Type"), body)
	}
	if resp.StatusCode != http.StatusOK {
		var eb console.ErrorBody
		if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
			t.Fatalf("%s %s: %d, not an error body: %s", method, path, resp.StatusCode, body)
		}
		return resp.StatusCode, eb.Error
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, body)
		}
	}
	return resp.StatusCode, nil
}

// unixClient is an HTTP client of the console socket sock.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// waitLiveRuns polls GET /runs until it lists a run (10 s at most).
func waitLiveRuns(t *testing.T, sock string) service.LiveRunsResult {
	t.Helper()
	var live service.LiveRunsResult
	waitfor.Within(10*time.Second, func() bool {
		do(t, sock, "GET", console.Prefix+"/runs", &live)
		return len(live.Runs) > 0
	})
	return live
}

func (f *fixture) run(t *testing.T, sid, skill, arg, confirmation string) error {
	t.Helper()
	_, err := f.svc.Run(context.Background(), f.me, service.RunRequest{Skill: f.skills[skill], Script: "scripts/run.sh", Args: []string{"--x", arg},
		Env: map[string]string{"TOKEN": "secret"}, Files: []runtime.InputFile{{Name: "in.txt", Data: []byte("data")}}},
		service.RunOptions{Method: api.MethodSkillsRunScript, SessionID: sid, ConfirmationID: confirmation})
	return err
}

func TestConsoleAPI(t *testing.T) {
	f := newFixture(t)
	ses, err := f.svc.CreateSession(context.Background(), f.me, api.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"ok", "fail", "timeout", "egress"} {
		if err := f.run(t, ses.SessionID, "plain", arg, ""); err != nil {
			t.Fatalf("plain %s: %v", arg, err)
		}
	}
	var cr *api.ConfirmationRequiredError
	if err := f.run(t, ses.SessionID, "guarded", "ok", ""); !errors.As(err, &cr) {
		t.Fatalf("guarded: %v, want a confirmation", err)
	}

	t.Run("whoami", func(t *testing.T) {
		for _, tc := range []struct {
			sock     string
			approver bool
		}{{f.approverSock, true}, {f.otherSock, false}} {
			var w console.Whoami
			do(t, tc.sock, "GET", console.Prefix+"/whoami", &w)
			if w.UID != f.me.UID || w.Approver != tc.approver {
				t.Errorf("whoami = %+v, want uid %d approver %v", w, f.me.UID, tc.approver)
			}
		}
	})
	t.Run("pending confirmation in full", func(t *testing.T) {
		var list api.ListConfirmationsResult
		do(t, f.approverSock, "GET", console.Prefix+"/confirmations?state=pending", &list)
		if len(list.Confirmations) != 1 || list.Confirmations[0].ID != cr.ID {
			t.Fatalf("pending = %+v, want %s", list.Confirmations, cr.ID)
		}
		var c api.Confirmation
		do(t, f.approverSock, "GET", console.Prefix+"/confirmations/"+cr.ID, &c)
		d := c.Details
		if c.Digest != cr.Digest || d["skill"] != "guarded" || d["skill_digest"] != f.skills["guarded"].Digest ||
			d["args"] != `"--x" "ok"` || d["env_names"] != "TOKEN" || !strings.Contains(d["inputs"], `"in.txt" 4 bytes sha256:`) {
			t.Errorf("confirmation = %+v", c)
		}
		if strings.Contains(strings.Join(mapValues(d), " "), "secret") {
			t.Error("an env value reached the confirmation")
		}
		if st, e := do(t, f.approverSock, "GET", console.Prefix+"/confirmations/cnf_nope", nil); st != http.StatusNotFound || e.Kind != api.KindNotFound {
			t.Errorf("unknown confirmation: %d %+v", st, e)
		}
	})
	t.Run("non-approver cannot approve", func(t *testing.T) {
		st, e := do(t, f.otherSock, "POST", console.Prefix+"/confirmations/"+cr.ID+"/approve", nil)
		if st != http.StatusForbidden || e.Kind != api.KindDenied {
			t.Fatalf("approve by a non-approver: %d %+v, want 403 denied", st, e)
		}
	})
	t.Run("approve once", func(t *testing.T) {
		var c api.Confirmation
		if st, e := do(t, f.approverSock, "POST", console.Prefix+"/confirmations/"+cr.ID+"/approve", &c); st != http.StatusOK || c.State != api.ConfirmationApproved {
			t.Fatalf("approve: %d %+v %+v", st, e, c)
		}
		st, e := do(t, f.approverSock, "POST", console.Prefix+"/confirmations/"+cr.ID+"/approve", nil)
		if st != http.StatusBadRequest || !strings.Contains(e.Message, "decisions are final") {
			t.Fatalf("second approve: %d %+v, want it refused", st, e)
		}
		if err := f.run(t, ses.SessionID, "guarded", "ok", cr.ID); err != nil {
			t.Fatalf("the approved run: %v", err)
		}
	})
	t.Run("audit search", func(t *testing.T) {
		var all service.AuditSearchResult
		do(t, f.approverSock, "GET", console.Prefix+"/audit?event=confirmation&limit=10", &all)
		var decided []string
		for _, r := range all.Records {
			decided = append(decided, r.Event+"/"+r.Outcome)
		}
		want := "confirmation.request/pending confirmation.approve/refused confirmation.approve/approved confirmation.approve/refused confirmation.use/used"
		if got := strings.Join(decided, " "); got != want || !all.Chain.Intact || all.OwnOnly {
			t.Errorf("approver's search: %s (chain %+v, own only %v), want %s, intact", got, all.Chain, all.OwnOnly, want)
		}
		var own service.AuditSearchResult
		do(t, f.otherSock, "GET", console.Prefix+"/audit?uid="+strconv.Itoa(int(f.me.UID)), &own)
		if !own.OwnOnly || own.Matched == 0 {
			t.Errorf("non-approver's search: %+v", own)
		}
		for _, r := range own.Records {
			if !strings.HasPrefix(r.Event, "run.") || r.Peer.UID != f.me.UID {
				t.Errorf("a non-approver sees %s of uid %d", r.Event, r.Peer.UID)
			}
		}
		var two service.AuditSearchResult
		do(t, f.approverSock, "GET", console.Prefix+"/audit?event=run.end&limit=2", &two)
		if len(two.Records) != 2 || two.Matched != 5 {
			t.Errorf("limit 2 of 5 run.end: %d records, matched %d", len(two.Records), two.Matched)
		}
		if st, e := do(t, f.approverSock, "GET", console.Prefix+"/audit?sesion=x", nil); st != http.StatusBadRequest || !strings.Contains(e.Message, `"sesion"`) {
			t.Errorf("a misspelt filter: %d %+v", st, e)
		}
	})
	t.Run("skill history", func(t *testing.T) {
		var h service.SkillHistory
		do(t, f.approverSock, "GET", console.Prefix+"/skills/plain/history?bucket=24h&since=7d", &h)
		if len(h.Buckets) != 1 {
			t.Fatalf("history = %+v, want one bucket", h)
		}
		b := h.Buckets[0]
		if b.Runs != 4 || b.Failures["exit"] != 1 || b.Failures["timeout"] != 1 || len(b.Failures) != 2 || b.EgressAttempts != 3 || b.EgressDenied != 1 {
			t.Errorf("bucket = %+v", b)
		}
		if st, _ := do(t, f.approverSock, "GET", console.Prefix+"/skills/plain/history?bucket=1s", nil); st != http.StatusBadRequest {
			t.Errorf("a 1s bucket: %d, want 400", st)
		}
	})
	t.Run("runs and proposals reach the service", func(t *testing.T) {
		for _, tc := range []struct {
			method, path string
			status       int
			kind         string
		}{
			// This service has no session sandboxes and no proposal store:
			// the service's own answers come through.
			{"GET", "/sessions/" + ses.SessionID + "/runs", http.StatusNotFound, api.KindNotFound},
			{"GET", "/sessions/ses_other/runs", http.StatusNotFound, api.KindNotFound},
			{"POST", "/runs/run_nope/cancel", http.StatusNotFound, api.KindNotFound},
			{"GET", "/proposals", http.StatusServiceUnavailable, api.KindUnavailable},
			{"POST", "/proposals/prop_x/reject", http.StatusServiceUnavailable, api.KindUnavailable},
		} {
			st, e := do(t, f.approverSock, tc.method, console.Prefix+tc.path, nil)
			if st != tc.status || e == nil || e.Kind != tc.kind {
				t.Errorf("%s %s: %d %+v, want %d %s", tc.method, tc.path, st, e, tc.status, tc.kind)
			}
		}
	})
	t.Run("live runs", func(t *testing.T) {
		done := make(chan error, 1)
		go func() { done <- f.run(t, ses.SessionID, "plain", "block", "") }()
		live := waitLiveRuns(t, f.approverSock)
		if len(live.Runs) != 1 || live.OwnOnly || live.Runs[0].Skill != "plain" || live.Runs[0].Script != "scripts/run.sh" ||
			live.Runs[0].SessionID != ses.SessionID || live.Runs[0].UID != f.me.UID || live.Runs[0].Started.IsZero() {
			t.Fatalf("live runs = %+v, want the blocked run", live)
		}
		if st, e := do(t, f.approverSock, "GET", console.Prefix+"/runs?all=1", nil); st != http.StatusBadRequest || e.Kind != api.KindInvalidParams {
			t.Errorf("an unknown parameter: %d %+v", st, e)
		}
		var other service.LiveRunsResult
		do(t, f.otherSock, "GET", console.Prefix+"/runs", &other)
		if !other.OwnOnly {
			t.Errorf("a non-approver's list = %+v, want own_only", other)
		}
		var cancelled api.CancelRunResult
		if st, _ := do(t, f.approverSock, "POST", console.Prefix+"/runs/"+live.Runs[0].RunID+"/cancel", &cancelled); st != http.StatusOK || !cancelled.Cancelled {
			t.Fatalf("cancel: %d %+v", st, cancelled)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled run did not end")
		}
		do(t, f.approverSock, "GET", console.Prefix+"/runs", &live)
		if len(live.Runs) != 0 {
			t.Errorf("after the run ended: %+v", live)
		}
	})
	if st, e := do(t, f.approverSock, "GET", console.Prefix+"/runs/run_nope/output", nil); st != http.StatusNotFound || e.Kind != api.KindNotFound {
		t.Errorf("output of no run: %d %+v", st, e)
	}
	// A stream outlives the server's read and write timeouts (a quiet
	// run's output can take minutes).
	shortRead, shortWrite := console.Server(f.svc, nil), console.Server(f.svc, nil)
	shortRead.ReadTimeout, shortWrite.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	for _, tc := range []struct {
		name  string
		sock  string
		pause time.Duration
	}{
		{"live output as server-sent events", f.approverSock, 0},
		{"live output past the read timeout", serveWith(t, shortRead), time.Second},
		{"live output past the write timeout", serveWith(t, shortWrite), time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- f.run(t, ses.SessionID, "plain", "talk", "") }()
			live := waitLiveRuns(t, tc.sock)
			if len(live.Runs) != 1 {
				t.Fatalf("live runs = %+v, want the talking run", live)
			}
			id := live.Runs[0].RunID
			resp, err := unixClient(tc.sock).Get("http://console" + console.Prefix + "/runs/" + id + "/output")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("output: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events := make(chan string, 16)
			go func() {
				defer close(events)
				sc := bufio.NewScanner(resp.Body)
				name := ""
				for sc.Scan() {
					line := sc.Text()
					switch {
					case strings.HasPrefix(line, "event: "):
						name = strings.TrimPrefix(line, "event: ")
					case strings.HasPrefix(line, "data: "):
						events <- name + " " + strings.TrimPrefix(line, "data: ")
					}
				}
			}()
			next := func() string {
				select {
				case ev, ok := <-events:
					if !ok {
						return "(end of stream)"
					}
					return ev
				case <-time.After(10 * time.Second):
					t.Fatal("no event in 10s")
					return ""
				}
			}
			if ev := next(); !strings.HasPrefix(ev, "run.started ") || !strings.Contains(ev, `"skill":"plain"`) {
				t.Errorf("first event %s", ev)
			}
			// The output arrives while the run is still going.
			if ev := next(); !strings.HasPrefix(ev, "run.output ") || !strings.Contains(ev, `"data":"talking\n"`) {
				t.Errorf("second event %s", ev)
			}
			time.Sleep(tc.pause)
			if st, _ := do(t, tc.sock, "POST", console.Prefix+"/runs/"+id+"/cancel", nil); st != http.StatusOK {
				t.Fatalf("cancel: %d", st)
			}
			if ev := next(); !strings.HasPrefix(ev, "run.exited ") || !strings.Contains(ev, `"reason":"cancelled"`) {
				t.Errorf("end event %s", ev)
			}
			if ev := next(); ev != "(end of stream)" {
				t.Errorf("after run.exited: %s", ev)
			}
			if err := <-done; err != nil {
				t.Errorf("the talking run: %v", err)
			}
		})
	}
	t.Run("unknown path", func(t *testing.T) {
		if st, e := do(t, f.approverSock, "GET", console.Prefix+"/nope", nil); st != http.StatusNotFound || e.Kind != api.KindNotFound {
			t.Errorf("unknown path: %d %+v", st, e)
		}
	})
	t.Run("tampered log shows broken", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(f.auditDir, "*.jsonl"))
		if len(files) == 0 {
			t.Fatalf("no log files in %s", f.auditDir)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		tampered := strings.Replace(string(b), `"args":["--x","ok"]`, `"args":["--x","OK"]`, 1)
		if tampered == string(b) {
			t.Fatal("nothing to tamper with")
		}
		if err := os.WriteFile(files[0], []byte(tampered), 0o600); err != nil {
			t.Fatal(err)
		}
		var res service.AuditSearchResult
		do(t, f.approverSock, "GET", console.Prefix+"/audit?event=run.start", &res)
		if res.Chain.Intact || res.Chain.Finding == "" {
			t.Errorf("chain after tampering: %+v", res.Chain)
		}
	})
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
