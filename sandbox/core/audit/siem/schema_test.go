package siem

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// everyEvent returns one record of each event skillbox writes, filled as
// the daemon fills it, and one of an event this package does not know.
func everyEvent() []*audit.Record {
	peer := &api.Peer{UID: 1000, GID: 1000, PID: 42, Process: "agent"}
	code := 0
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	run := &audit.RunInfo{RunID: "r1", Script: "scripts/fill.py", ScriptSHA256: "ab12", Args: []string{"--x"}, Started: start}
	ended := *run
	ended.ExitCode, ended.Reason, ended.Ended, ended.DurationMS = &code, "exit", start.Add(time.Second), 1000
	skill := &audit.SkillRef{Name: "pdf", Digest: "sha256:00"}
	conf := &audit.ConfirmationInfo{ID: "c1", Digest: "d", Rule: "ask"}
	ws := &audit.WorkspaceOpInfo{Path: "a/b.txt", Size: 3, SHA256: "cc"}
	var out []*audit.Record
	add := func(r audit.Record) { out = append(out, &r) }
	add(audit.Record{Event: audit.EventGenesis, Log: &audit.LogInfo{ID: "log1", Version: 1}})
	add(audit.Record{Event: audit.EventDaemonStart, Daemon: &audit.DaemonInfo{Version: "1.2.3", PID: 1}})
	add(audit.Record{Event: audit.EventSessionCreate, Peer: peer, SessionID: "s1", Method: "session.create", RequestID: "7"})
	add(audit.Record{Event: audit.EventSkillLoad, Peer: peer, SessionID: "s1", Skill: skill})
	add(audit.Record{Event: audit.EventSkillUnload, Peer: peer, SessionID: "s1", Skills: []audit.SkillRef{*skill}})
	add(audit.Record{Event: audit.EventSkillRead, Peer: peer, Skill: skill, Read: &audit.ReadInfo{Path: "SKILL.md", Bytes: 10, SHA256: "ee"}, Outcome: audit.OutcomeOK})
	add(audit.Record{Event: eventSkillLock, Peer: peer, Skill: skill})
	add(audit.Record{Event: eventSkillRefused, Peer: peer, Skill: skill, Outcome: audit.OutcomeRefused, Error: "digest mismatch"})
	add(audit.Record{Event: eventSkillActivate, Peer: peer, Skill: skill})
	add(audit.Record{Event: audit.EventDecision, Peer: peer, Skill: skill, Decision: &audit.DecisionInfo{Tool: "skills.run_script", Effect: "deny", Rule: "no-net", RulePos: "p.hcl:3"}})
	add(audit.Record{Event: audit.EventConfirmRequest, Peer: peer, Confirmation: conf})
	add(audit.Record{Event: audit.EventConfirmApprove, Peer: peer, Confirmation: conf})
	add(audit.Record{Event: audit.EventConfirmDeny, Peer: peer, Confirmation: conf})
	add(audit.Record{Event: audit.EventConfirmExpire, Confirmation: conf, Outcome: "expired"})
	add(audit.Record{Event: audit.EventConfirmUse, Peer: peer, Confirmation: conf})
	add(audit.Record{Event: audit.EventRunStart, Peer: peer, SessionID: "s1", Skill: skill, Run: run})
	add(audit.Record{Event: audit.EventRunSignal, Peer: peer, Run: run, Detail: map[string]string{"signal": "TERM"}})
	add(audit.Record{Event: audit.EventEgress, Egress: &audit.EgressInfo{RunID: "r1", Attempt: egress.Attempt{Kind: "connect", Host: "pypi.org", Address: "151.101.0.223", Port: 443, Allowed: true, Rule: "pypi", Out: 10, In: 20, DurationMS: 5}}})
	add(audit.Record{Event: audit.EventEgress, Egress: &audit.EgressInfo{RunID: "r1", Attempt: egress.Attempt{Kind: "dns", Host: "evil.example", Rule: "none"}}})
	add(audit.Record{Event: audit.EventEgress, Egress: &audit.EgressInfo{RunID: "r1", Attempt: egress.Attempt{Kind: "aggregate", Count: 9}}, Outcome: audit.OutcomeAggregated})
	add(audit.Record{Event: audit.EventRunEnd, Peer: peer, SessionID: "s1", Skill: skill, Run: &ended, Outcome: "exit", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"})
	add(audit.Record{Event: audit.EventAuthRefused, Peer: &api.Peer{UID: 4242, PID: 7}, Method: "skills.read", Outcome: audit.OutcomeRefused, Error: "uid not allowed"})
	add(audit.Record{Event: audit.EventSessionSandbox, Peer: peer, SessionID: "s1", Outcome: "started"})
	add(audit.Record{Event: audit.EventSessionCheckpoint, Peer: peer, SessionID: "s1"})
	add(audit.Record{Event: audit.EventSessionRestore, Peer: peer, SessionID: "s1"})
	add(audit.Record{Event: audit.EventSessionFork, Peer: peer, SessionID: "s1"})
	add(audit.Record{Event: audit.EventCallRefused, Peer: peer, Method: "nope", Outcome: audit.OutcomeRefused, Detail: map[string]string{"kind": "method"}})
	add(audit.Record{Event: audit.EventWorkspaceList, Peer: peer, SessionID: "s1", WorkspaceOp: &audit.WorkspaceOpInfo{Path: ".", Entries: 2}})
	add(audit.Record{Event: audit.EventWorkspaceStat, Peer: peer, SessionID: "s1", WorkspaceOp: ws})
	add(audit.Record{Event: audit.EventWorkspaceRead, Peer: peer, SessionID: "s1", WorkspaceOp: ws})
	add(audit.Record{Event: audit.EventWorkspaceWrite, Peer: peer, SessionID: "s1", WorkspaceOp: ws})
	add(audit.Record{Event: audit.EventWorkspaceDelete, Peer: peer, SessionID: "s1", WorkspaceOp: ws})
	add(audit.Record{Event: eventDepsBuild, Skill: skill, Outcome: audit.OutcomeError, Error: "too large"})
	add(audit.Record{Event: eventProposalCreate, Peer: peer, Skill: skill})
	add(audit.Record{Event: eventProposalApprove, Peer: peer, Skill: skill})
	add(audit.Record{Event: eventProposalReject, Peer: peer, Skill: skill})
	add(audit.Record{Event: audit.EventSessionClose, Peer: peer, SessionID: "s1"})
	add(audit.Record{Event: audit.EventRotate, Log: &audit.LogInfo{ID: "log1", File: "audit-000002.jsonl", PrevFile: "audit-000001.jsonl", Reason: "size"}})
	add(audit.Record{Event: audit.EventRecovered, Log: &audit.LogInfo{ID: "log1", Dropped: &audit.Dropped{File: "audit-000002.jsonl", Offset: 9, Bytes: 3, SHA256: "ff"}}})
	add(audit.Record{Event: audit.EventResumed, Log: &audit.LogInfo{ID: "log1", Outage: &audit.Outage{Since: start, Refused: 2}}})
	add(audit.Record{Event: audit.EventCheckpoint, Checkpoint: &audit.Checkpoint{Seq: 40, KeyID: "k"}})
	add(audit.Record{Event: audit.EventDaemonStop, Daemon: &audit.DaemonInfo{Version: "1.2.3"}, Error: "signal"})
	add(audit.Record{Event: "future.thing", Detail: map[string]string{"x": "y"}})
	for i, r := range out {
		r.Seq, r.Time, r.Replica, r.Hash = uint64(i+1), start.Add(time.Duration(i)*time.Millisecond), "node-a", fmt.Sprintf("%064x", i+1)
	}
	return out
}

// TestEveryEventMapped checks the mapping table names every event
// constant of sandbox/core/audit/record.go, read from its source so a new
// event cannot be missed.
func TestEveryEventMapped(t *testing.T) {
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, "../record.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(nd ast.Node) bool {
		vs, ok := nd.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if !strings.HasPrefix(name.Name, "Event") || i >= len(vs.Values) {
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok {
				continue
			}
			ev, _ := strconv.Unquote(lit.Value)
			n++
			if _, ok := mappings[ev]; !ok {
				t.Errorf("audit.%s (%q) has no mapping in events.go", name.Name, ev)
			}
			if !slices.ContainsFunc(everyEvent(), func(r *audit.Record) bool { return r.Event == ev }) {
				t.Errorf("audit.%s (%q) is missing from everyEvent", name.Name, ev)
			}
		}
		return true
	})
	if n < 30 {
		t.Fatalf("found only %d event constants in record.go", n)
	}
	for ev := range mappings {
		if !slices.ContainsFunc(everyEvent(), func(r *audit.Record) bool { return r.Event == ev }) {
			t.Errorf("%q is mapped but missing from everyEvent", ev)
		}
	}
}

// ocsfTable is testdata/ocsf-1.3.0-required.json.
type ocsfTable struct {
	Schema string
	Base   struct {
		Required    map[string]string
		Recommended map[string]string
		Enums       map[string][]int
	}
	Classes map[string]struct {
		Name        string
		CategoryUID int `json:"category_uid"`
		Required    map[string]string
		ActivityIDs []int `json:"activity_ids"`
	}
	Objects map[string]struct {
		Required   map[string]string
		AtLeastOne []string `json:"at_least_one"`
	}
}

// ecsTable is testdata/ecs-8.11.0-base.json.
type ecsTable struct {
	Schema   string
	Required map[string]string
	Enums    map[string][]string
}

func loadJSON(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// hasType reports whether v is of the table's type name.
func hasType(v any, typ string) bool {
	switch typ {
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := n.Int64()
		return err == nil
	case "string", "date":
		s, ok := v.(string)
		if typ == "date" {
			_, err := time.Parse(time.RFC3339Nano, s)
			return ok && err == nil
		}
		return ok && s != ""
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		a, ok := v.([]any)
		return ok && len(a) > 0
	}
	return false
}

func decodeBody(t testing.TB, b []byte) map[string]any {
	t.Helper()
	o, err := decodeObject(b)
	if err != nil {
		t.Fatalf("mapped record is not one JSON object: %v\n%s", err, b)
	}
	return o
}

func intOf(v any) int {
	n, _ := v.(json.Number)
	i, _ := n.Int64()
	return int(i)
}

// checkOCSF returns what ev lacks or gets wrong against the table.
func checkOCSF(tab *ocsfTable, ev map[string]any) []string {
	var bad []string
	need := func(o map[string]any, where string, req map[string]string) {
		for k, typ := range req {
			if !hasType(o[k], typ) {
				bad = append(bad, fmt.Sprintf("%s%s: want %s, have %#v", where, k, typ, o[k]))
			}
		}
	}
	need(ev, "", tab.Base.Required)
	need(ev, "", tab.Base.Recommended)
	for k, vals := range tab.Base.Enums {
		if !slices.Contains(vals, intOf(ev[k])) {
			bad = append(bad, fmt.Sprintf("%s %v not in %v", k, ev[k], vals))
		}
	}
	cls, ok := tab.Classes[fmt.Sprint(ev["class_uid"])]
	if !ok {
		return append(bad, fmt.Sprintf("class_uid %v is not a class of the table", ev["class_uid"]))
	}
	need(ev, "", cls.Required)
	act := intOf(ev["activity_id"])
	if intOf(ev["category_uid"]) != cls.CategoryUID {
		bad = append(bad, fmt.Sprintf("category_uid %v, class %s is in %d", ev["category_uid"], cls.Name, cls.CategoryUID))
	}
	if !slices.Contains(cls.ActivityIDs, act) {
		bad = append(bad, fmt.Sprintf("activity_id %d is not one of %s's %v", act, cls.Name, cls.ActivityIDs))
	}
	if want := intOf(ev["class_uid"])*100 + act; intOf(ev["type_uid"]) != want {
		bad = append(bad, fmt.Sprintf("type_uid %v, want class_uid*100+activity_id = %d", ev["type_uid"], want))
	}
	if ev["class_name"] != cls.Name {
		bad = append(bad, fmt.Sprintf("class_name %v, want %s", ev["class_name"], cls.Name))
	}
	// Objects present, and those nested in them the table names.
	objs := map[string]map[string]any{}
	for k, v := range ev {
		if o, ok := v.(map[string]any); ok {
			objs[k] = o
		}
	}
	if md := objs["metadata"]; md != nil {
		if p, ok := md["product"].(map[string]any); ok {
			objs["product"] = p
		}
		if md["version"] != OCSFVersion {
			bad = append(bad, fmt.Sprintf("metadata.version %v, want %s", md["version"], OCSFVersion))
		}
	}
	if a := objs["api"]; a != nil {
		if r, ok := a["request"].(map[string]any); ok {
			objs["request"] = r
		}
	}
	for name, o := range objs {
		spec, ok := tab.Objects[name]
		if !ok {
			continue
		}
		need(o, name+".", spec.Required)
		if len(spec.AtLeastOne) > 0 && !slices.ContainsFunc(spec.AtLeastOne, func(k string) bool { return o[k] != nil }) {
			bad = append(bad, fmt.Sprintf("%s has none of %v", name, spec.AtLeastOne))
		}
	}
	if _, ok := ev["unmapped"].(map[string]any); !ok {
		bad = append(bad, "unmapped: the record is not kept")
	}
	return bad
}

// checkECS returns what doc lacks or gets wrong against the table.
func checkECS(tab *ecsTable, doc map[string]any) []string {
	var bad []string
	get := func(dotted string) any {
		var v any = doc
		if dotted == "@timestamp" {
			return doc[dotted]
		}
		for _, k := range strings.Split(dotted, ".") {
			o, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = o[k]
		}
		return v
	}
	for k, typ := range tab.Required {
		if !hasType(get(k), typ) {
			bad = append(bad, fmt.Sprintf("%s: want %s, have %#v", k, typ, get(k)))
		}
	}
	for k, vals := range tab.Enums {
		v := get(k)
		list, isList := v.([]any)
		if !isList {
			list = []any{v}
		}
		for _, x := range list {
			if x == nil && k == "event.category" {
				continue // an unknown event has none
			}
			if s, _ := x.(string); !slices.Contains(vals, s) {
				bad = append(bad, fmt.Sprintf("%s %#v not in %v", k, x, vals))
			}
		}
	}
	if get("ecs.version") != ECSVersion {
		bad = append(bad, fmt.Sprintf("ecs.version %v, want %s", get("ecs.version"), ECSVersion))
	}
	if _, ok := doc["skillbox"].(map[string]any); !ok {
		bad = append(bad, "skillbox: the record is not kept")
	}
	return bad
}

func TestSchemaRequiredFields(t *testing.T) {
	var ot ocsfTable
	var et ecsTable
	loadJSON(t, "ocsf-1.3.0-required.json", &ot)
	loadJSON(t, "ecs-8.11.0-base.json", &et)
	if ot.Schema != "OCSF "+OCSFVersion || et.Schema != "ECS "+ECSVersion {
		t.Fatalf("tables are for %q and %q, the code writes OCSF %s and ECS %s", ot.Schema, et.Schema, OCSFVersion, ECSVersion)
	}
	om, _ := NewMapper(FormatOCSF, "dev")
	em, _ := NewMapper(FormatECS, "dev")
	for _, r := range everyEvent() {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(r.Event, func(t *testing.T) {
			msg, err := om.Map(raw, nil)
			if err != nil {
				t.Fatal(err)
			}
			ev := decodeBody(t, msg.Body)
			for _, b := range checkOCSF(&ot, ev) {
				t.Errorf("ocsf: %s\n%s", b, msg.Body)
			}
			if _, known := mappings[r.Event]; known == (intOf(ev["class_uid"]) == 0) {
				t.Errorf("ocsf: class_uid %v for %s", ev["class_uid"], r.Event)
			}
			msg, err = em.Map(raw, r)
			if err != nil {
				t.Fatal(err)
			}
			doc := decodeBody(t, msg.Body)
			for _, b := range checkECS(&et, doc) {
				t.Errorf("ecs: %s\n%s", b, msg.Body)
			}
			if _, known := mappings[r.Event]; known && len(mappingOf(r).ECSCategory) == 0 {
				t.Errorf("ecs: %s has no event.category", r.Event)
			}
		})
	}
}

// TestMappedValues spot-checks what a SIEM keys on.
func TestMappedValues(t *testing.T) {
	om, _ := NewMapper(FormatOCSF, "dev")
	em, _ := NewMapper(FormatECS, "dev")
	byEvent := map[string]map[string]any{}
	ecsBy := map[string]map[string]any{}
	for _, r := range everyEvent() {
		raw, _ := json.Marshal(r)
		m, err := om.Map(raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		e, err := em.Map(raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		key := r.Event
		if r.Egress != nil {
			key += "/" + r.Egress.Kind
		}
		byEvent[key], ecsBy[key] = decodeBody(t, m.Body), decodeBody(t, e.Body)
	}
	path := func(o map[string]any, dotted string) string {
		var v any = o
		for _, k := range strings.Split(dotted, ".") {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		if a, ok := v.([]any); ok && len(a) > 0 {
			v = a[0]
			if m, ok := v.(map[string]any); ok {
				return fmt.Sprint(m["decision"])
			}
		}
		return fmt.Sprint(v)
	}
	for _, c := range []struct{ doc, key, field, want string }{
		{"ocsf", "run.start", "type_uid", "100701"},
		{"ocsf", "run.end", "exit_code", "0"},
		{"ocsf", "run.end", "process.uid", "r1"},
		{"ocsf", "run.end", "metadata.correlation_uid", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"ocsf", "run.start", "metadata.correlation_uid", "<nil>"},
		{"ecs", "run.end", "trace.id", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"ecs", "run.start", "trace.id", "<nil>"},
		{"ocsf", "egress.connect/connect", "type_uid", "400101"},
		{"ocsf", "egress.connect/dns", "type_uid", "400105"},
		{"ocsf", "egress.connect/dns", "status_id", "2"},
		{"ocsf", "egress.connect/connect", "dst_endpoint.ip", "151.101.0.223"},
		{"ocsf", "auth.refused", "user.uid", "4242"},
		{"ocsf", "auth.refused", "severity_id", "3"},
		{"ocsf", "policy.decision", "actor.authorizations", "deny"},
		{"ocsf", "policy.decision", "status_id", "2"},
		{"ocsf", "daemon.start", "type_uid", "600203"},
		{"ocsf", "daemon.stop", "app.version", "1.2.3"},
		{"ocsf", "session.create", "metadata.product.version", "1.2.3"},
		{"ocsf", "session.create", "api.request.uid", "7"},
		{"ocsf", "audit.rotate", "type_uid", "100805"},
		{"ocsf", "future.thing", "type_uid", "99"},
		{"ocsf", "future.thing", "unmapped.detail.x", "y"},
		{"ecs", "run.end", "process.exit_code", "0"},
		{"ecs", "run.end", "process.parent.pid", "42"},
		{"ecs", "session.create", "user.id", "1000"},
		{"ecs", "egress.connect/dns", "event.outcome", "failure"},
		{"ecs", "egress.connect/connect", "destination.port", "443"},
		{"ecs", "policy.decision", "rule.name", "no-net"},
		{"ecs", "workspace.write", "file.hash.sha256", "cc"},
		{"ecs", "future.thing", "event.action", "future.thing"},
		{"ecs", "future.thing", "skillbox.detail.x", "y"},
		{"ecs", "session.create", "service.node.name", "node-a"},
	} {
		t.Run(c.doc+"/"+c.key+"/"+c.field, func(t *testing.T) {
			src := byEvent
			if c.doc == "ecs" {
				src = ecsBy
			}
			if got := path(src[c.key], c.field); got != c.want {
				t.Errorf("%s = %q, want %q", c.field, got, c.want)
			}
		})
	}
}
