package siem

import (
	"net/netip"
	"path"
	"strings"
	"time"

	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// ecs maps r to an ECS 8.11.0 document: @timestamp, ecs.version, the event
// fieldset (kind, category, type, action, outcome, id, sequence, severity),
// the caller as user.* (and, for a non-run event, process.pid), the run as
// process.*, an egress attempt as destination.*/network.*, the skillbox
// replica as service.node.name, the call's OpenTelemetry trace as trace.id,
// and the record whole under skillbox.
func (m *Mapper) ecs(r *audit.Record, orig map[string]any) map[string]any {
	mp := mappingOf(r)
	status, _ := statusOf(r)
	sev, _ := severityOf(r, status)
	outcome := "unknown"
	switch status {
	case statusSuccess:
		outcome = "success"
	case statusFailure:
		outcome = "failure"
	}
	event := map[string]any{
		"kind":     "event",
		"type":     mp.ECSType,
		"action":   r.Event,
		"outcome":  outcome,
		"id":       eventUID(r),
		"sequence": r.Seq,
		"severity": sev,
		"dataset":  "skillbox.audit",
		"module":   ProductName,
		"provider": ProductName,
	}
	if len(mp.ECSCategory) > 0 {
		event["category"] = mp.ECSCategory
	}
	if r.Error != "" {
		event["reason"] = r.Error
	}
	doc := map[string]any{
		"@timestamp": r.Time.UTC().Format(time.RFC3339Nano),
		"ecs":        map[string]any{"version": ECSVersion},
		"event":      event,
		"message":    message(r),
		"skillbox":   orig,
	}
	svc := map[string]any{"name": ProductName, "type": ProductName, "version": m.version(r.Replica)}
	if r.Replica != "" {
		svc["node"] = map[string]any{"name": r.Replica}
	}
	doc["service"] = svc
	if r.TraceID != "" {
		doc["trace"] = map[string]any{"id": r.TraceID} // ECS tracing fields: the OpenTelemetry trace
	}
	if r.Error != "" {
		doc["error"] = map[string]any{"message": r.Error}
	}
	if p := r.Peer; p != nil {
		doc["user"] = map[string]any{"id": uidString(p.UID), "group": map[string]any{"id": uidString(p.GID)}}
	}
	if run := r.Run; run != nil {
		doc["process"] = ecsRunProcess(r)
		if run.DurationMS > 0 {
			event["duration"] = run.DurationMS * int64(time.Millisecond)
		}
		if !run.Started.IsZero() {
			event["start"] = run.Started.UTC().Format(time.RFC3339Nano)
		}
		if !run.Ended.IsZero() {
			event["end"] = run.Ended.UTC().Format(time.RFC3339Nano)
		}
	} else if r.Peer != nil && r.Peer.PID > 0 {
		doc["process"] = map[string]any{"pid": r.Peer.PID}
	}
	if d := r.Decision; d != nil {
		rule := map[string]any{"name": d.Rule}
		if d.RulePos != "" {
			rule["reference"] = d.RulePos
		}
		if d.Reason != "" {
			rule["description"] = d.Reason
		}
		doc["rule"] = rule
	}
	if e := r.Egress; e != nil {
		dst := map[string]any{"bytes": e.In}
		if e.Host != "" {
			dst["domain"] = e.Host
			dst["address"] = e.Host
		}
		if e.Address != "" {
			dst["address"] = e.Address
			if _, err := netip.ParseAddr(e.Address); err == nil {
				dst["ip"] = e.Address
			}
		}
		if e.Port != 0 {
			dst["port"] = e.Port
		}
		doc["destination"] = dst
		doc["source"] = map[string]any{"bytes": e.Out}
		net := map[string]any{"direction": "egress", "bytes": e.In + e.Out}
		if e.Kind == "dns" {
			net["protocol"] = "dns"
		} else if e.Kind != "aggregate" {
			net["transport"] = "tcp"
		}
		doc["network"] = net
		if e.DurationMS > 0 {
			event["duration"] = e.DurationMS * int64(time.Millisecond)
		}
		if e.Rule != "" {
			doc["rule"] = map[string]any{"name": e.Rule}
		}
	}
	if f := ecsFileOf(r); f != nil {
		doc["file"] = f
	}
	return doc
}

// ecsRunProcess is the sandboxed run; the caller that asked for it is its
// parent.
func ecsRunProcess(r *audit.Record) map[string]any {
	run := r.Run
	p := map[string]any{
		"name": path.Base(run.Script),
		"args": append([]string{run.Script}, run.Args...),
	}
	p["command_line"] = strings.Join(p["args"].([]string), " ")
	if run.RunID != "" {
		p["entity_id"] = run.RunID
	}
	if run.ScriptSHA256 != "" {
		p["hash"] = map[string]any{"sha256": run.ScriptSHA256}
	}
	if run.ExitCode != nil {
		p["exit_code"] = *run.ExitCode
	}
	if !run.Started.IsZero() {
		p["start"] = run.Started.UTC().Format(time.RFC3339Nano)
	}
	if !run.Ended.IsZero() {
		p["end"] = run.Ended.UTC().Format(time.RFC3339Nano)
	}
	if r.Peer != nil && r.Peer.PID > 0 {
		p["parent"] = map[string]any{"pid": r.Peer.PID}
	}
	return p
}

// ecsFileOf is the file a read or workspace call concerned.
func ecsFileOf(r *audit.Record) map[string]any {
	switch {
	case r.Read != nil:
		f := map[string]any{"path": r.Read.Path, "name": path.Base(r.Read.Path)}
		if r.Read.Bytes > 0 {
			f["size"] = r.Read.Bytes
		}
		if r.Read.SHA256 != "" {
			f["hash"] = map[string]any{"sha256": r.Read.SHA256}
		}
		return f
	case r.WorkspaceOp != nil:
		w := r.WorkspaceOp
		f := map[string]any{"path": w.Path, "name": path.Base(w.Path)}
		if w.Size > 0 {
			f["size"] = w.Size
		}
		if w.SHA256 != "" {
			f["hash"] = map[string]any{"sha256": w.SHA256}
		}
		return f
	}
	return nil
}
