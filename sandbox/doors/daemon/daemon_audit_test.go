package daemon

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/doors/jsonrpc"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
)

// serveSocket serves the harness's daemon on a fresh socket until the test
// ends, and returns the socket's path.
func (h *daemonHarness) serveSocket() string {
	t := h.t
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.sock")
	ln, err := sockfile.Listen(path, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.d.Server().Serve(ctx, ln) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		h.d.Server().Shutdown(sctx)
		cancel()
		<-done
	})
	return path
}

// lineConn is a raw connection to the daemon's socket.
type lineConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialLines(t *testing.T, path string) *lineConn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &lineConn{t: t, nc: nc, br: bufio.NewReaderSize(nc, 1<<16)}
}

func (c *lineConn) send(line string) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.nc.Write([]byte(line + "\n")); err != nil {
		c.t.Fatal(err)
	}
}

// exchange sends a line and reads one answer: its result and error object.
func (c *lineConn) exchange(line string) (json.RawMessage, map[string]any) {
	c.t.Helper()
	c.send(line)
	c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := c.br.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("reading the answer to %.60q: %v", line, err)
	}
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  map[string]any  `json:"error"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("answer %q: %v", b, err)
	}
	return m.Result, m.Error
}

// roundTrip is exchange for callers that only care about the error.
func (c *lineConn) roundTrip(line string) map[string]any {
	c.t.Helper()
	_, e := c.exchange(line)
	return e
}

func hexSHA(b string) string {
	s := sha256.Sum256([]byte(b))
	return hex.EncodeToString(s[:])
}

// byRequestID finds the one record of event for a request id.
func byRequestID(t *testing.T, recs []audit.Record, id string) *audit.Record {
	t.Helper()
	var found *audit.Record
	for i := range recs {
		if recs[i].RequestID == id {
			if found != nil {
				t.Fatalf("two records for request %s: %+v and %+v", id, *found, recs[i])
			}
			found = &recs[i]
		}
	}
	if found == nil {
		t.Fatalf("no record for request %s", id)
	}
	return found
}

func TestDaemonRefusedCallsAudited(t *testing.T) {
	cfg := strings.Replace(testConfig, "max_active_skills = 3", "max_active_skills = 3\n  max_line_bytes = 4096", 1)
	h := newHarness(t, cfg, defaultSkills())
	c := dialLines(t, h.serveSocket())
	me := api.Peer{UID: uint32(os.Getuid()), PID: int32(os.Getpid())}

	// Transport-level refusals.
	if e := c.roundTrip("GET / HTTP/1.1"); e["code"] != float64(jsonrpc.CodeParseError) {
		t.Fatalf("not JSON: %v", e)
	}
	if e := c.roundTrip(`{"id":2,"method":"sessions.create"}`); e["code"] != float64(jsonrpc.CodeInvalidRequest) {
		t.Fatalf("no jsonrpc: %v", e)
	}
	unknownParams := `{"x":"hunter2"}`
	if e := c.roundTrip(`{"jsonrpc":"2.0","id":3,"method":"skills.lodd","params":` + unknownParams + `}`); e["code"] != float64(jsonrpc.CodeMethodNotFound) {
		t.Fatalf("unknown method: %v", e)
	}
	long := `{"jsonrpc":"2.0","id":4,"method":"skills.read","params":{"pad":"` + strings.Repeat("x", 5000) + `"}}`
	if e := c.roundTrip(long); e["code"] != float64(jsonrpc.CodeInvalidRequest) {
		t.Fatalf("over-long line: %v", e)
	}
	// Refused by a handler, with nothing more specific recorded.
	badParams := `{"secret":"hunter2"}`
	if e := c.roundTrip(`{"jsonrpc":"2.0","id":5,"method":"sessions.create","params":` + badParams + `}`); e["code"] != float64(jsonrpc.CodeInvalidParams) {
		t.Fatalf("bad params: %v", e)
	}
	ghost := "ses_" + strings.Repeat("0", 32)
	if e := c.roundTrip(`{"jsonrpc":"2.0","id":"six","method":"skills.load","params":{"session_id":"` + ghost + `","names":["hello"]}}`); e["code"] != float64(jsonrpc.CodeNotFound) {
		t.Fatalf("unknown session: %v", e)
	}
	// A notification gets no answer but is audited all the same; the next
	// answer proves its record was written (the reader audits a line
	// before it reads the next).
	c.send(`{"jsonrpc":"2.0","method":"nope.notify","params":{}}`)
	if e := c.roundTrip(`{"jsonrpc":"2.0","id":7,"method":"skills.list"}`); e != nil {
		t.Fatalf("skills.list: %v", e)
	}

	// A refusal a handler audits in detail gets no second record.
	res, e := c.exchange(`{"jsonrpc":"2.0","id":8,"method":"sessions.create"}`)
	var cr api.CreateSessionResult
	if e != nil || json.Unmarshal(res, &cr) != nil {
		t.Fatalf("sessions.create: %s %v", res, e)
	}
	if e := c.roundTrip(`{"jsonrpc":"2.0","id":9,"method":"skills.load","params":{"session_id":"` + cr.SessionID + `","names":["hello"]}}`); e != nil {
		t.Fatalf("load: %v", e)
	}
	if e := c.roundTrip(`{"jsonrpc":"2.0","id":10,"method":"skills.read","params":{"session_id":"` + cr.SessionID + `","path":"../other/SKILL.md"}}`); e["code"] != float64(jsonrpc.CodeInvalidParams) {
		t.Fatalf("escaping read: %v", e)
	}

	recs := h.audit.Events(audit.EventCallRefused)
	if len(recs) != 7 {
		for _, r := range recs {
			t.Logf("%+v", r)
		}
		t.Fatalf("%d call.refused records, want 7", len(recs))
	}
	for _, r := range recs {
		if r.Peer == nil || r.Peer.UID != me.UID || r.Peer.PID != me.PID || r.Outcome != audit.OutcomeRefused || r.Error == "" || r.Detail["kind"] == "" || r.Detail["conn"] == "" {
			t.Errorf("incomplete record %+v", r)
		}
		b, _ := json.Marshal(r)
		if strings.Contains(string(b), "hunter2") {
			t.Errorf("params reached the audit log: %s", b)
		}
	}
	notJSON := recs[0]
	if notJSON.RequestID != "" || notJSON.Method != "" || notJSON.Detail["code"] != "-32700" || notJSON.Detail["line_start"] != `"GET / HTTP/1.1"` ||
		notJSON.Detail["line_bytes"] != "14" || notJSON.Detail["line_sha256"] != hexSHA("GET / HTTP/1.1") {
		t.Errorf("parse error record %+v", notJSON)
	}
	if r := byRequestID(t, recs, "2"); r.Method != "sessions.create" || r.Detail["code"] != "-32600" || r.Detail["line_start"] != "" {
		t.Errorf("invalid request record %+v", r)
	}
	if r := byRequestID(t, recs, "3"); r.Method != "skills.lodd" || r.Detail["code"] != "-32601" || r.Detail["kind"] != api.KindNotFound ||
		r.Detail["params_sha256"] != hexSHA(unknownParams) || r.Detail["params_bytes"] != "15" || !strings.Contains(r.Error, "skills.load") {
		t.Errorf("unknown method record %+v", r)
	}
	if r := byRequestID(t, recs, "4"); r.Method != "skills.read" || r.Detail["kind"] != api.KindLimitExceeded || r.Detail["line_bytes"] != strconv.Itoa(len(long)) ||
		r.Detail["line_sha256"] != "" {
		t.Errorf("over-long line record %+v (line is %d bytes)", r, len(long))
	}
	if r := byRequestID(t, recs, "5"); r.Method != "sessions.create" || r.Detail["code"] != "-32602" || !strings.Contains(r.Error, "secret") ||
		r.Detail["params_sha256"] != hexSHA(badParams) {
		t.Errorf("bad params record %+v", r)
	}
	if r := byRequestID(t, recs, `"six"`); r.Method != "skills.load" || r.SessionID != ghost || r.Detail["kind"] != api.KindNotFound {
		t.Errorf("unknown session record %+v", r)
	}
	if r := recs[6]; r.Method != "nope.notify" || r.RequestID != "" || r.Detail["code"] != "-32601" {
		t.Errorf("notification record %+v", r)
	}
	// The escaping read has its skills.read record, and only that.
	var refusedRead bool
	for _, r := range h.audit.Events(audit.EventSkillRead) {
		refusedRead = refusedRead || (r.RequestID == "10" && r.Outcome == audit.OutcomeRefused)
	}
	if !refusedRead {
		t.Error("no refused skills.read record for the escaping read")
	}
}

func TestDaemonRefusedRecordsCappedPerConnection(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills(), func(o *Options, _ *store.StateDB) { o.MaxRefusedRecords = 3 })
	path := h.serveSocket()
	c := dialLines(t, path)
	for i := 0; i < 10; i++ {
		if e := c.roundTrip("garbage"); e["code"] != float64(jsonrpc.CodeParseError) {
			t.Fatalf("garbage %d: %v", i, e)
		}
	}
	// Other kinds count too.
	if e := c.roundTrip(`{"jsonrpc":"2.0","id":1,"method":"x.y"}`); e["code"] != float64(jsonrpc.CodeMethodNotFound) {
		t.Fatalf("unknown method: %v", e)
	}
	if n := len(h.audit.Events(audit.EventCallRefused)); n != 3 {
		t.Fatalf("%d records before the connection closed, want the cap of 3", n)
	}
	c.nc.Close()
	var sum audit.Record
	waitfor.True(t, "the summary record", time.Minute, func() bool {
		recs := h.audit.Events(audit.EventCallRefused)
		if len(recs) == 4 {
			sum = recs[3]
			return true
		}
		return false
	})
	if sum.Outcome != "suppressed" || sum.Detail["suppressed"] != "8" || sum.Detail["recorded"] != "3" ||
		sum.Detail["kinds"] != "invalid_params=7 not_found=1" || sum.Peer == nil || sum.Peer.UID != uint32(os.Getuid()) {
		t.Errorf("summary record %+v", sum)
	}
	// A new connection starts with a fresh allowance; a connection that
	// stayed under its cap leaves no summary.
	c2 := dialLines(t, path)
	c2.roundTrip("more garbage")
	c2.nc.Close()
	c3 := dialLines(t, path)
	if e := c3.roundTrip(`{"jsonrpc":"2.0","id":1,"method":"skills.list"}`); e != nil {
		t.Fatal(e)
	}
	if n := len(h.audit.Events(audit.EventCallRefused)); n != 5 {
		t.Errorf("%d records, want 5", n)
	}
}

func TestDaemonRefusedAuditFailureHarmless(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	c := dialLines(t, h.serveSocket())
	h.audit.Fail(errors.New("disk gone"))
	for i := 0; i < 3; i++ {
		if e := c.roundTrip("{not json"); e["code"] != float64(jsonrpc.CodeParseError) {
			t.Fatalf("garbage: %v", e)
		}
	}
	if e := c.roundTrip(`{"jsonrpc":"2.0","id":1,"method":"skills.list"}`); e != nil {
		t.Fatalf("skills.list with the audit log down: %v", e)
	}
	h.audit.Fail(nil)
	if e := c.roundTrip("{still not json"); e["code"] != float64(jsonrpc.CodeParseError) {
		t.Fatalf("garbage: %v", e)
	}
	if n := len(h.audit.Events(audit.EventCallRefused)); n != 1 {
		t.Errorf("%d records once the log is back, want 1", n)
	}
}

// handlerErr calls a handler directly and returns its error as is.
func (h *daemonHarness) handlerErr(peer api.Peer, method string, params any) error {
	h.t.Helper()
	raw, _ := json.Marshal(params)
	_, err := h.d.Server().Handler(method)(context.Background(), &jsonrpc.Call{ID: json.RawMessage(`1`), Method: method, Params: raw, Peer: peer, ConnID: 1})
	if err == nil {
		h.t.Fatalf("%s: no error", method)
	}
	return err
}

// Errors a handler audited in detail are marked, so no call.refused record
// doubles them; the others are not.
func TestDaemonDetailedRefusalsMarkedAudited(t *testing.T) {
	cfg := testConfig + `
policy "no-read" {
  skills = ["third"]
  deny   = ["skills.read"]
}
`
	h := newHarness(t, cfg, defaultSkills())
	sid := h.session(peerA)
	h.load(peerA, sid, "add", "hello", "third", "guarded-deploy")
	run := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"x"}}, Skill: "guarded-deploy", Path: "scripts/deploy.sh"}
	e := h.fails(peerA, "skills.run_script", run, api.KindConfirmationRequired)
	cid := e.Data["confirmation_id"].(string)
	h.ok(peerRoot, "confirmations.approve", api.ConfirmationIDParams{ID: cid}, nil)
	mismatch := run
	mismatch.Args, mismatch.ConfirmationID = []string{"y"}, cid

	for _, tc := range []struct {
		what    string
		method  string
		params  any
		peer    api.Peer
		audited bool
	}{
		{"escaping read", "skills.read", api.ReadParams{SessionID: sid, Skill: "hello", Path: "../x"}, peerA, true},
		{"missing file", "skills.read", api.ReadParams{SessionID: sid, Skill: "hello", Path: "nope.md"}, peerA, true},
		{"policy deny", "skills.read", api.ReadParams{SessionID: sid, Skill: "third", Path: "SKILL.md"}, peerA, true},
		{"needs confirmation", "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"z"}}, Skill: "guarded-deploy", Path: "scripts/deploy.sh"}, peerA, true},
		{"approval mismatch", "skills.run_script", mismatch, peerA, true},
		{"not an approver", "confirmations.approve", api.ConfirmationIDParams{ID: cid}, peerA, true},
		{"unknown confirmation", "confirmations.deny", api.ConfirmationIDParams{ID: "cnf_" + strings.Repeat("1", 32)}, peerRoot, true},
		{"unknown session", "skills.read", api.ReadParams{SessionID: "ses_" + strings.Repeat("1", 32), Path: "SKILL.md"}, peerA, false},
		{"bad params", "skills.load", map[string]any{"session_id": sid, "nmes": []string{"x"}}, peerA, false},
		{"not loaded", "skills.read", api.ReadParams{SessionID: sid, Skill: "fourth", Path: "SKILL.md"}, peerA, false},
		{"script outside scripts/", "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "hello", Path: "SKILL.md"}, peerA, false},
	} {
		err := h.handlerErr(tc.peer, tc.method, tc.params)
		if got := api.IsAudited(err); got != tc.audited {
			t.Errorf("%s: marked audited %v, want %v (%v)", tc.what, got, tc.audited, err)
		}
		// The mark changes nothing on the wire.
		if re := jsonrpc.ToRPCError(err); re.Kind == "" || re.Message != err.Error() {
			t.Errorf("%s: wire error %+v", tc.what, re)
		}
	}
	// The confirmation's data survives the mark.
	err := h.handlerErr(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"w"}}, Skill: "guarded-deploy", Path: "scripts/deploy.sh"})
	if re := jsonrpc.ToRPCError(err); re.Kind != api.KindConfirmationRequired || re.Data["confirmation_id"] == nil {
		t.Errorf("confirmation_required lost its data: %+v", re)
	}
	// A run that failed in the sandbox is in its run.end record.
	h.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		return nil, errors.New("sandbox exploded")
	}
	err = h.handlerErr(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "hello", Path: "scripts/run.py"})
	if !api.IsAudited(err) || api.KindOf(err) != api.KindInternal {
		t.Errorf("failed run: audited %v, kind %s: %v", api.IsAudited(err), api.KindOf(err), err)
	}
	if ends := h.audit.Events(audit.EventRunEnd); len(ends) == 0 || !strings.Contains(ends[len(ends)-1].Error, "sandbox exploded") {
		t.Errorf("run.end records %+v", ends)
	}
}

func TestDaemonSessionCreateRolledBackWhenUnaudited(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	h.audit.Fail(errors.New("read-only file system"))
	h.fails(peerA, "sessions.create", nil, api.KindUnavailable, "audit log cannot be written")
	if ss, err := h.opts.Sessions.List(peerA.UID); err != nil || len(ss) != 0 {
		t.Fatalf("an unaudited session was left behind: %+v %v", ss, err)
	}
	h.audit.Fail(nil)
	sid := h.session(peerA)
	if ss, _ := h.opts.Sessions.List(peerA.UID); len(ss) != 1 || ss[0].ID != sid {
		t.Fatalf("sessions %+v", ss)
	}
	if recs := h.audit.Events(audit.EventSessionCreate); len(recs) != 1 || recs[0].SessionID != sid {
		t.Errorf("session.create records %+v", recs)
	}
}

func TestDaemonExpiriesAudited(t *testing.T) {
	clk := servicetest.NewClock()
	h := newHarness(t, testConfig, defaultSkills(), func(o *Options, st *store.StateDB) {
		o.Sessions = store.NewSessionStore(st, store.SessionOptions{Now: clk.Now, TTL: time.Hour})
		o.Confirmations = store.NewConfirmationStore(st, store.ConfirmationOptions{Now: clk.Now})
	})
	sid := h.session(peerA)
	h.load(peerA, sid, "", "guarded-deploy")
	ask := func(arg string) string {
		e := h.fails(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{arg}}, Path: "scripts/deploy.sh"}, api.KindConfirmationRequired)
		return e.Data["confirmation_id"].(string)
	}
	c1, c2, c3 := ask("1"), ask("2"), ask("3")
	h.ok(peerRoot, "confirmations.approve", api.ConfirmationIDParams{ID: c2}, nil)
	clk.Advance(h.cfg.Daemon.ConfirmationTTL + time.Second)

	// Found expired by an approver, by the run that wanted to use it, and
	// by the sweep: one record each, however often it is looked at.
	h.fails(peerRoot, "confirmations.approve", api.ConfirmationIDParams{ID: c1}, api.KindInvalidParams, "expired")
	h.fails(peerRoot, "confirmations.deny", api.ConfirmationIDParams{ID: c1}, api.KindInvalidParams)
	h.fails(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"2"}, ConfirmationID: c2}, Path: "scripts/deploy.sh"}, api.KindInvalidParams, "expired")
	for i := 0; i < 2; i++ {
		if _, err := h.opts.Confirmations.Sweep(); err != nil {
			t.Fatal(err)
		}
	}
	recs := h.audit.Events(audit.EventConfirmExpire)
	if len(recs) != 3 {
		t.Fatalf("%d confirmation.expire records, want 3: %+v", len(recs), recs)
	}
	for _, id := range []string{c1, c2, c3} {
		n := 0
		for _, r := range recs {
			if r.Confirmation != nil && r.Confirmation.ID == id {
				n++
				if r.SessionID != sid || r.Outcome != "expired" || r.Confirmation.Digest == "" || r.Confirmation.RequestedBy == nil ||
					*r.Confirmation.RequestedBy != peerA.UID || r.Confirmation.Expires.IsZero() {
					t.Errorf("expire record %+v %+v", r, r.Confirmation)
				}
				if want := map[string]string{c1: "pending", c2: "approved", c3: "pending"}[id]; r.Detail["was"] != want {
					t.Errorf("%s was %q, want %q", id, r.Detail["was"], want)
				}
			}
		}
		if n != 1 {
			t.Errorf("confirmation %s: %d expire records", id, n)
		}
	}

	// A session that goes unused past its TTL is audited when swept.
	clk.Advance(2 * time.Hour)
	if n, err := h.opts.Sessions.Sweep(); err != nil || n != 1 {
		t.Fatalf("session sweep: %d, %v", n, err)
	}
	var expired []audit.Record
	for _, r := range h.audit.Events(audit.EventSessionClose) {
		if r.Outcome == "expired" {
			expired = append(expired, r)
		}
	}
	if len(expired) != 1 || expired[0].SessionID != sid || expired[0].Detail["owner_uid"] != "1000" {
		t.Errorf("session expiry records %+v", expired)
	}
}

func TestDaemonSkillsListShape(t *testing.T) {
	h := newHarness(t, testConfig, defaultSkills())
	hidden := servicetest.MakeSkill(t, h.root, servicetest.SkillSpec{Name: "manual-only"})
	hidden.DisableModelInvocation = true
	hidden.Tags = []string{"ops", "manual"}
	h.index.Put(hidden)

	raw, e := h.call(peerA, "skills.list", nil)
	if e != nil {
		t.Fatal(e)
	}
	var list []map[string]any
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("skills.list is not a bare array: %s", raw)
	}
	if len(list) != len(defaultSkills())+1 {
		t.Fatalf("%d skills listed", len(list))
	}
	for _, s := range list {
		for _, k := range []string{"name", "description", "location", "digest", "tags", "model_invocable"} {
			if _, ok := s[k]; !ok {
				t.Errorf("entry %v lacks %q", s["name"], k)
			}
		}
		if _, ok := s["tags"].([]any); !ok {
			t.Errorf("%v: tags %v is not an array", s["name"], s["tags"])
		}
		if (s["name"] == "manual-only") == (s["model_invocable"] == true) {
			t.Errorf("%v: model_invocable %v", s["name"], s["model_invocable"])
		}
	}
	// A query matches tags too; no match is an empty array, not null.
	var got []api.SkillInfo
	h.ok(peerA, "skills.list", api.ListSkillsParams{Query: "OPS"}, &got)
	if len(got) != 1 || got[0].Name != "manual-only" || got[0].ModelInvocable || strings.Join(got[0].Tags, ",") != "ops,manual" {
		t.Errorf("query ops: %+v", got)
	}
	if raw, e := h.call(peerA, "skills.list", api.ListSkillsParams{Query: "no such thing"}); e != nil || string(raw) != "[]" {
		t.Errorf("no match: %s %v", raw, e)
	}
}

// A missing image fails a run at once (no build inside the call), before an
// approver is asked and without a run record; with build_on_demand the
// image counts as available.
func TestDaemonMissingImageFailsFast(t *testing.T) {
	dir := t.TempDir()
	imgs, err := images.OpenStore(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	recipes, err := images.DefaultRecipes()
	if err != nil {
		t.Fatal(err)
	}
	si := &runner.StoreImages{Store: imgs, Recipes: recipes}
	h := newHarness(t, testConfig, defaultSkills(), func(o *Options, _ *store.StateDB) {
		e := o.Engine
		o.Engine = runner.New(runner.Options{Config: e.Config(), Images: si, Runtime: e.Runtime(), Pins: e.Pins(), Audit: o.Audit})
	})

	sid := h.session(peerA)
	h.load(peerA, sid, "add", "hello", "guarded-deploy")
	e := h.fails(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "hello", Path: "scripts/run.py"}, api.KindUnavailable,
		"image python is not built", "skillbox images build --dir "+imgs.Dir()+" python", "build_on_demand")
	t.Logf("refusal: %s", e.Message)
	h.fails(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "guarded-deploy", Path: "scripts/deploy.sh"}, api.KindUnavailable, "image shell is not built")
	if n := len(h.rt.Jobs()); n != 0 {
		t.Fatalf("%d runs", n)
	}
	for _, ev := range []string{audit.EventRunStart, audit.EventConfirmRequest} {
		if recs := h.audit.Events(ev); len(recs) != 0 {
			t.Errorf("%s records for runs that could not start: %+v", ev, recs)
		}
	}
	if pend, _ := h.opts.Confirmations.List(store.ConfirmationFilter{}); len(pend) != 0 {
		t.Errorf("an approver was asked about a run that cannot start: %+v", pend)
	}
	// The refusal is not marked as audited: the daemon's call.refused
	// record covers it.
	if err := h.handlerErr(peerA, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "hello", Path: "scripts/run.py"}); api.IsAudited(err) {
		t.Error("missing image refusal marked audited")
	}

	if err := si.Built("python"); !errors.Is(err, images.ErrNotBuilt) {
		t.Errorf("Built(python) = %v", err)
	}
	if err := si.Available("nope"); api.KindOf(err) != api.KindInvalidParams {
		t.Errorf("Available(nope) = %v", err)
	}
	si.Build = true
	if err := si.Available("python"); err != nil {
		t.Errorf("with build on demand: %v", err)
	}
	if got := runner.BuildCommand(images.DefaultDir, "python"); got != "skillbox images build python" {
		t.Errorf("runner.BuildCommand(default) = %q", got)
	}
}
