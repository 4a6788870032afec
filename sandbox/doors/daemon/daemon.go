// Package daemon is what `skillbox serve` runs: the service
// (sandbox/core/service) behind the JSON-RPC server on the Unix socket
// (sandbox/doors/jsonrpc), and the audit of every call the socket refuses
// (call.refused, capped per connection, so a flood of bad lines cannot fill
// the audit disk).
package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/doors/jsonrpc"
)

// Options wire the daemon: the service it serves (its options, declared
// once in service.Options) and the daemon's own bound. The caller owns the
// parts' lifetimes.
type Options struct {
	service.Options
	// MaxRefusedRecords bounds the call.refused records written for one
	// connection (0: DefaultMaxRefusedRecords; negative: no bound). See
	// Daemon's comment.
	MaxRefusedRecords int
	// Tracer, when set (daemon.traces), starts each call's root span.
	Tracer trace.Tracer
}

// DefaultMaxRefusedRecords is how many refused calls of one connection are
// audited one by one before the rest are only counted.
const DefaultMaxRefusedRecords = 64

// refusedAuditTimeout bounds the wait for a call.refused record: the
// refusal's answer waits for it.
const refusedAuditTimeout = 10 * time.Second

// Daemon serves the tool calls of the Agent Skills runtime protocol on a
// Unix socket.
//
// Every call that is refused or fails is audited. The service records what
// it refuses in detail (a refused read, a policy deny, a confirmation
// refusal, a run's end) and marks those errors (api.MarkAudited); every
// other error answer, including the transport's own (a line that is not
// JSON, an invalid request, an unknown method, an over-long line), gets one
// call.refused record before the answer is sent, with the peer, method,
// request id, error kind and message, and of the params only their size and
// sha256, never their content (they may carry env values or stdin). A
// client that loops sending garbage could otherwise grow the log without
// bound, so each connection gets at most MaxRefusedRecords such records;
// further refusals on it are counted by kind and summed up in one
// call.refused record (outcome "suppressed") when the connection closes.
// The log therefore grows by at most MaxRefusedRecords+1 records per
// connection. That bounds a flood on one connection, not a client that
// reconnects in a loop; such a client is still slowed down, since each of
// its refusals waits for an fsynced record before it is answered, and the
// peer it runs as is in every record. A failure to write these records is
// logged and changes nothing else: the call was refused anyway.
type Daemon struct {
	svc    *service.Service
	audit  audit.Recorder // the service's journal
	log    hclog.Logger
	server *jsonrpc.Server

	conns *connRefusals

	refusedCap int
	refMu      sync.Mutex
	refused    map[uint64]*refusedTally // by connection; only those with refusals
}

// refusedTally counts one connection's refused calls.
type refusedTally struct {
	peer       api.Peer
	recorded   int
	suppressed int
	kinds      map[string]int // suppressed refusals by error kind
}

// New builds the service and the JSON-RPC server with every method
// registered.
func New(o Options) *Daemon {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	dc := o.Config.Daemon
	so := o.Options
	so.Logger = log
	svc := service.New(so)
	d := &Daemon{
		svc:        svc,
		audit:      svc.Journal(),
		log:        log.Named("daemon"),
		refusedCap: o.MaxRefusedRecords,
		refused:    map[uint64]*refusedTally{},
	}
	if d.refusedCap == 0 {
		d.refusedCap = DefaultMaxRefusedRecords
	}
	d.conns = newConnRefusals(o.Config.Audit.AggregateInterval, d.writeRefusal)
	d.server = jsonrpc.NewServer(jsonrpc.ServerOptions{
		MaxConnections:        dc.MaxConnections,
		MaxLineBytes:          dc.MaxLineBytes,
		IdleTimeout:           dc.IdleTimeout,
		MaxConnsPerUID:        dc.MaxConnectionsPerUID,
		ReservedConns:         dc.ApproverConnections,
		MaxRequestBytesPerUID: dc.MaxRequestBytesPerUID,
		Privileged:            d.svc.IsApprover,
		OnConnRefused:         d.conns.refused,
		Logger:                log,
		OnAuthRefused:         d.authRefused,
		OnCallError:           d.callRefused,
		OnConnClosed:          d.connClosed,
		Tracer:                o.Tracer,
	})
	jsonrpc.RegisterService(d.server, d.svc)
	return d
}

// Server exposes the JSON-RPC server (Serve, Shutdown).
func (d *Daemon) Server() *jsonrpc.Server { return d.server }

// Service exposes the service the daemon serves.
func (d *Daemon) Service() *service.Service { return d.svc }

// ConnRefused audits a connection refused by a cap on one of the daemon's
// other listeners (the console and metrics sockets), the way refusals on
// the main socket are: one record per uid and interval, the rest counted.
func (d *Daemon) ConnRefused(p api.Peer, reason string) { d.conns.refused(p, reason) }

func (d *Daemon) authRefused(p api.Peer, reason string) {
	if !d.audit.Enabled() {
		return
	}
	// A failure is logged by the journal: the connection was refused anyway.
	_ = d.audit.Record(context.Background(), &audit.Record{Event: audit.EventAuthRefused, Peer: &p, Outcome: "refused", Error: reason})
}

// callRefused audits a refused or failed call that no handler audited in
// detail (see Daemon's comment), within the connection's cap.
func (d *Daemon) callRefused(ce *jsonrpc.CallError) {
	if !d.audit.Enabled() || ce.Resp == nil || (ce.Err != nil && api.IsAudited(ce.Err)) {
		return
	}
	if !d.tallyRefused(ce.ConnID, ce.Peer, ce.Resp.Kind) {
		return
	}
	rec := refusedRecord(ce)
	ctx, cancel := context.WithTimeout(context.Background(), refusedAuditTimeout)
	defer cancel()
	if err := d.audit.Record(ctx, rec); err != nil {
		d.log.Warn("audit of a refused call failed", "method", rec.Method, "kind", ce.Resp.Kind, "error", err)
	}
}

// tallyRefused counts a refusal on conn and reports whether it is still
// within the connection's cap of records.
func (d *Daemon) tallyRefused(conn uint64, p api.Peer, kind string) bool {
	d.refMu.Lock()
	defer d.refMu.Unlock()
	t := d.refused[conn]
	if t == nil {
		t = &refusedTally{peer: p}
		d.refused[conn] = t
	}
	if d.refusedCap < 0 || t.recorded < d.refusedCap {
		t.recorded++
		return true
	}
	t.suppressed++
	if t.kinds == nil {
		t.kinds = map[string]int{}
	}
	t.kinds[kind]++
	return false
}

// connClosed forgets a connection's tally, first writing the summary of the
// refusals that went over its cap.
func (d *Daemon) connClosed(conn uint64, _ api.Peer) {
	d.refMu.Lock()
	t := d.refused[conn]
	delete(d.refused, conn)
	d.refMu.Unlock()
	if t == nil || t.suppressed == 0 || !d.audit.Enabled() {
		return
	}
	kinds := make([]string, 0, len(t.kinds))
	for k, n := range t.kinds {
		kinds = append(kinds, k+"="+strconv.Itoa(n))
	}
	sort.Strings(kinds)
	rec := &audit.Record{
		Event: audit.EventCallRefused, Peer: &t.peer, Outcome: "suppressed",
		Error: fmt.Sprintf("%d more calls were refused on this connection after the first %d refusals were recorded; they were only counted", t.suppressed, t.recorded),
		Detail: map[string]string{
			"conn": strconv.FormatUint(conn, 10), "suppressed": strconv.Itoa(t.suppressed),
			"recorded": strconv.Itoa(t.recorded), "kinds": strings.Join(kinds, " "),
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), refusedAuditTimeout)
	defer cancel()
	if err := d.audit.Record(ctx, rec); err != nil {
		d.log.Warn("audit of suppressed refusals failed", "conn", conn, "suppressed", t.suppressed, "error", err)
	}
}

// Bounds on client-controlled text in audit records.
const (
	maxAuditMethod    = 128
	maxAuditMessage   = 512
	maxAuditLineStart = 32
)

// refusedRecord is the call.refused record of ce. The params are never
// copied: a run's env values or stdin must not reach the log.
func refusedRecord(ce *jsonrpc.CallError) *audit.Record {
	peer := ce.Peer
	r := &audit.Record{
		Event:     audit.EventCallRefused,
		Peer:      &peer,
		RequestID: service.AuditRequestID(string(ce.ID)),
		Method:    audit.ClipText(ce.Method, maxAuditMethod),
		Outcome:   audit.OutcomeRefused,
		Error:     audit.ClipText(ce.Resp.Message, maxAuditMessage),
		Detail: map[string]string{
			"kind": ce.Resp.Kind,
			"code": strconv.Itoa(ce.Resp.Code),
			"conn": strconv.FormatUint(ce.ConnID, 10),
		},
	}
	if ce.Resp.Kind == api.KindInternal {
		r.Outcome = audit.OutcomeError
	}
	if ce.Params != nil {
		r.SessionID = paramsSession(ce.Params)
		r.Detail["params_bytes"] = strconv.Itoa(len(ce.Params))
		r.Detail["params_sha256"] = runner.SHA256Hex(ce.Params)
	}
	if ce.Line != nil || ce.LineBytes > 0 {
		r.Detail["line_bytes"] = strconv.Itoa(ce.LineBytes)
		if len(ce.Line) == ce.LineBytes {
			r.Detail["line_sha256"] = runner.SHA256Hex(ce.Line)
		}
		if ce.Resp.Code == jsonrpc.CodeParseError {
			// Not JSON at all: the start of the line, escaped, says what
			// was talking to the socket (an HTTP client, a shell, ...).
			r.Detail["line_start"] = strconv.QuoteToASCII(string(ce.Line[:min(len(ce.Line), maxAuditLineStart)]))
		}
	}
	return r
}

// paramsSession is the params' session_id when it is well-formed.
func paramsSession(params json.RawMessage) string {
	var p struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal(params, &p) == nil && store.ValidID(p.SessionID, "ses_") {
		return p.SessionID
	}
	return ""
}
