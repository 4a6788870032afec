package mcp_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/doors/mcp"
)

// Lines the MCP transport refuses are audited like the socket's refused
// calls (bad input gets a clear error, is audited, and leaves the server
// up), through the service's audit log: a record per refusal naming it,
// up to a budget per uid and interval, the rest summed up in one
// aggregated record; the chain verifies.

// auditedServer serves the real service, writing a real audit log in a
// temp dir, on an IO transport with refusals wired as skillbox mcp wires
// them. It returns the client, the service and the log's dir.
func auditedServer(t *testing.T, maxLine int) (*rawClient, *service.Service, *audit.Log, string) {
	t.Helper()
	dir := t.TempDir()
	lg, err := audit.Open(dir, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	opts := newRealService(t).opts
	opts.Audit = audit.NewJournal(lg, nil)
	svc := service.New(opts)
	c := connectRawWith(t, svc, mcp.Options{Caller: someone, OnRefused: func(r api.Refusal) { svc.AuditRefusal(someone, r) }}, maxLine)
	return c, svc, lg, dir
}

// refusedRecords closes the log, verifies its chain and returns its
// call.refused records.
func refusedRecords(t *testing.T, svc *service.Service, lg *audit.Log, dir string) []audit.Record {
	t.Helper()
	svc.FlushAudit()
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.Verify(dir, audit.VerifyOptions{}); err != nil {
		t.Fatalf("the audit chain does not verify: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var out []audit.Record
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r audit.Record
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Event == audit.EventCallRefused {
				out = append(out, r)
			}
		}
		f.Close()
	}
	return out
}

func TestRefusedLinesAudited(t *testing.T) {
	c, svc, lg, dir := auditedServer(t, 2048)
	dup := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/a.sh","path":"scripts/b.sh","env":{"TOKEN":"s3cret"}}}}`
	c.send(dup)
	if code, _ := rpcError(t, c.recv("7")); code != -32602 {
		t.Errorf("duplicate key: code %d", code)
	}
	c.send(`not json {"TOKEN":"s3cret"}`)
	rpcError(t, c.recv("null"))
	c.send(`{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"x":"` + strings.Repeat("a", 4096) + `"}}`)
	rpcError(t, c.recv("null"))
	// Still up.
	c.send(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`)
	if r := c.recv("9"); r["error"] != nil {
		t.Fatalf("tools/list after the refusals: %s", r["error"])
	}

	recs := refusedRecords(t, svc, lg, dir)
	want := []struct{ kind, code, requestID, method, errText string }{
		{api.KindInvalidParams, "-32602", "7", "tools/call", `"path" appears twice in params.arguments`},
		{api.KindInvalidParams, "-32700", "", "", "not valid JSON"},
		{api.KindLimitExceeded, "-32600", "", "", "longer than 2048 bytes"},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d call.refused records, want %d: %+v", len(recs), len(want), recs)
	}
	for i, w := range want {
		r := recs[i]
		if r.Outcome != audit.OutcomeRefused || r.Peer == nil || r.Peer.UID != someone.UID || r.Detail["transport"] != "mcp" ||
			r.Detail["kind"] != w.kind || r.Detail["code"] != w.code || r.RequestID != w.requestID || r.Method != w.method ||
			!strings.Contains(r.Error, w.errText) || r.Detail["line_bytes"] == "0" {
			t.Errorf("record %d = %+v, want kind %s code %s id %q method %q error containing %q", i, r, w.kind, w.code, w.requestID, w.method, w.errText)
		}
		if b, _ := json.Marshal(r); strings.Contains(string(b), "s3cret") {
			t.Errorf("record %d holds the refused line's content: %s", i, b)
		}
	}
}

// A client looping on bad lines adds a bounded number of records: the
// first 64 of the interval one by one, the rest counted in one.
func TestRefusedLinesAggregated(t *testing.T) {
	c, svc, lg, dir := auditedServer(t, 4096)
	const n = 70
	for i := range n {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{"a":1,"A":2}}`, 100+i))
		rpcError(t, c.recv(fmt.Sprint(100+i)))
	}
	recs := refusedRecords(t, svc, lg, dir)
	if len(recs) != 65 {
		t.Fatalf("%d call.refused records, want 64 and one aggregate", len(recs))
	}
	last := recs[64]
	if last.Outcome != audit.OutcomeAggregated || last.Detail["refusals"] != "6" || last.Detail["kinds"] != "invalid_params=6" || last.Detail["transport"] != "mcp" {
		t.Errorf("aggregate = %+v", last)
	}
}
