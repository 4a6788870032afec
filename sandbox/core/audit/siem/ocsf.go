package siem

import (
	"net/netip"
	"path"

	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// ocsf maps r to an OCSF 1.3.0 event of its class (see mappings): the
// classification, time, metadata, status and severity every class
// requires, what its class requires besides (actor, api, src_endpoint,
// process, device, dst_endpoint, user, app), and the record whole under
// unmapped.
func (m *Mapper) ocsf(r *audit.Record, orig map[string]any) map[string]any {
	mp := mappingOf(r)
	c := mp.Class
	status, statusName := statusOf(r)
	sev, sevName := severityOf(r, status)
	ev := map[string]any{
		"activity_id":   mp.Activity,
		"activity_name": mp.ActivityName,
		"category_uid":  c.CategoryUID,
		"category_name": c.CategoryName,
		"class_uid":     c.UID,
		"class_name":    c.Name,
		"type_uid":      c.UID*100 + mp.Activity,
		"type_name":     c.Name + ": " + mp.ActivityName,
		"severity_id":   sev,
		"severity":      sevName,
		"status_id":     status,
		"status":        statusName,
		"time":          r.Time.UnixMilli(),
		"message":       message(r),
		"metadata": map[string]any{
			"version":      OCSFVersion,
			"uid":          eventUID(r),
			"sequence":     r.Seq,
			"log_name":     "audit",
			"log_provider": ProductName,
			"product": map[string]any{
				"name":        ProductName,
				"vendor_name": VendorName,
				"version":     m.version(r.Replica),
			},
		},
		"unmapped": orig,
	}
	if r.TraceID != "" {
		// The OpenTelemetry trace the record belongs to: events of one
		// call, and the call's spans, share it.
		ev["metadata"].(map[string]any)["correlation_uid"] = r.TraceID
	}
	if c.UID == classBase.UID {
		ev["activity_name"] = r.Event
		ev["type_name"] = c.Name + ": " + r.Event
	}
	if r.Outcome != "" {
		ev["status_code"] = r.Outcome
	}
	if r.Error != "" {
		ev["status_detail"] = r.Error
	}
	actor := ocsfActor(r)
	switch c {
	case classAPI:
		ev["actor"] = actor
		ev["src_endpoint"] = srcEndpoint(r)
		op := r.Method
		if op == "" {
			op = r.Event
		}
		a := map[string]any{"operation": op, "service": map[string]any{"name": ProductName}}
		if r.RequestID != "" {
			a["request"] = map[string]any{"uid": r.RequestID}
		}
		ev["api"] = a
		if res := ocsfResources(r); len(res) > 0 {
			ev["resources"] = res
		}
	case classProcess:
		ev["actor"] = actor
		ev["device"] = device(r)
		ev["process"] = ocsfProcess(r)
		if r.Run != nil && r.Run.ExitCode != nil {
			ev["exit_code"] = *r.Run.ExitCode
		}
	case classNetwork:
		ev["actor"] = actor
		ev["dst_endpoint"] = dstEndpoint(r)
		ev["connection_info"] = map[string]any{"direction_id": 2, "direction": "Outbound"}
		if e := r.Egress; e != nil {
			ev["traffic"] = map[string]any{"bytes_in": e.In, "bytes_out": e.Out}
			if e.DurationMS > 0 {
				ev["duration"] = e.DurationMS
			}
		}
	case classAuth:
		ev["actor"] = actor
		ev["src_endpoint"] = srcEndpoint(r)
		u := map[string]any{"name": "unknown"}
		if r.Peer != nil {
			u = map[string]any{"uid": uidString(r.Peer.UID)}
		}
		ev["user"] = u
		ev["service"] = map[string]any{"name": ProductName}
	case classAppLifecycle:
		app := map[string]any{"name": ProductName, "vendor_name": VendorName, "version": m.version(r.Replica)}
		if r.Daemon != nil && r.Daemon.Version != "" {
			app["version"] = r.Daemon.Version
		}
		ev["app"] = app
		ev["device"] = device(r)
	case classEventLog:
		ev["log_name"] = "audit"
		ev["log_provider"] = ProductName
		ev["device"] = device(r)
		if r.Log != nil && r.Log.File != "" {
			ev["file"] = map[string]any{"name": r.Log.File, "type_id": 1, "type": "Regular File"}
		}
	}
	return ev
}

// ocsfActor is who acted: the calling peer (uid, gid and pid; its
// self-chosen process name stays in unmapped only), the session, and the
// authorization a policy decision gave. Without a peer it is skillbox
// itself.
func ocsfActor(r *audit.Record) map[string]any {
	a := map[string]any{"app_name": ProductName}
	if p := r.Peer; p != nil {
		a["user"] = map[string]any{"uid": uidString(p.UID), "groups": []any{map[string]any{"uid": uidString(p.GID)}}}
		if p.PID > 0 {
			a["process"] = map[string]any{"pid": p.PID}
		}
	}
	if r.SessionID != "" {
		a["session"] = map[string]any{"uid": r.SessionID}
	}
	if d := r.Decision; d != nil {
		pol := map[string]any{"name": d.Rule}
		if d.Rule == "" {
			pol["name"] = "(none)"
		}
		if d.RulePos != "" {
			pol["uid"] = d.RulePos
		}
		if d.Reason != "" {
			pol["desc"] = d.Reason
		}
		a["authorizations"] = []any{map[string]any{"decision": d.Effect, "policy": pol}}
	}
	return a
}

// srcEndpoint is where a call came from: a local peer on skillbox's socket,
// or skillbox itself.
func srcEndpoint(r *audit.Record) map[string]any {
	if r.Peer != nil {
		return map[string]any{"name": "local"}
	}
	return map[string]any{"name": ProductName}
}

// device is the host that wrote the record, named by its replica.
func device(r *audit.Record) map[string]any {
	name := r.Replica
	if name == "" {
		name = ProductName
	}
	return map[string]any{"name": name, "type_id": 0, "type": "Unknown"}
}

// ocsfProcess is the sandboxed run (or, for a build, the skill's layer
// build), identified by its run id.
func ocsfProcess(r *audit.Record) map[string]any {
	p := map[string]any{"uid": eventUID(r)}
	if run := r.Run; run != nil {
		if run.RunID != "" {
			p["uid"] = run.RunID
		}
		p["name"] = path.Base(run.Script)
		cmd := run.Script
		for _, a := range run.Args {
			cmd += " " + a
		}
		p["cmd_line"] = cmd
		if run.ScriptSHA256 != "" {
			p["file"] = map[string]any{"name": path.Base(run.Script), "path": run.Script, "type_id": 1, "type": "Regular File",
				"hashes": []any{map[string]any{"algorithm_id": 3, "algorithm": "SHA-256", "value": run.ScriptSHA256}}}
		}
		if !run.Started.IsZero() {
			p["created_time"] = run.Started.UnixMilli()
		}
		if !run.Ended.IsZero() {
			p["terminated_time"] = run.Ended.UnixMilli()
		}
	} else if r.Skill != nil {
		p["name"] = r.Skill.Name
	}
	return p
}

// dstEndpoint is an egress attempt's destination: its name, address (as
// ip when it is one) and port.
func dstEndpoint(r *audit.Record) map[string]any {
	d := map[string]any{}
	if e := r.Egress; e != nil {
		if e.Host != "" {
			d["hostname"] = e.Host
		}
		if e.Address != "" {
			if _, err := netip.ParseAddr(e.Address); err == nil {
				d["ip"] = e.Address
			} else {
				d["name"] = e.Address
			}
		}
		if e.Port != 0 {
			d["port"] = e.Port
		}
	}
	if len(d) == 0 {
		d["name"] = "unknown"
		if r.Egress != nil && r.Egress.Kind != "" {
			d["name"] = r.Egress.Kind
		}
	}
	return d
}

// ocsfResources names what an API call was about: its skills and the file
// it read or changed.
func ocsfResources(r *audit.Record) []any {
	var out []any
	for _, n := range r.SkillNames() {
		out = append(out, map[string]any{"type": "skill", "name": n})
	}
	if r.Read != nil {
		out = append(out, map[string]any{"type": "file", "name": r.Read.Path})
	}
	if r.WorkspaceOp != nil {
		out = append(out, map[string]any{"type": "file", "name": r.WorkspaceOp.Path})
	}
	if c := r.Confirmation; c != nil {
		out = append(out, map[string]any{"type": "confirmation", "uid": c.ID})
	}
	return out
}
