package sandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/skills"
)

// SkillIndex is what the daemon needs of the registry.
type SkillIndex interface {
	Get(name string) (*skills.Skill, error)
	List() []*skills.Skill
}

// DaemonOptions wires the daemon's parts; the caller owns their lifetimes.
type DaemonOptions struct {
	Config        *policy.Config
	Skills        SkillIndex
	Engine        *Engine
	Sessions      *SessionStore
	Confirmations *ConfirmationStore
	// Audit receives every event; nil means none (tests). The daemon
	// refuses runs while it is unhealthy.
	Audit  Auditor
	Logger hclog.Logger
	// MaxRefusedRecords bounds the call.refused records written for one
	// connection (0: DefaultMaxRefusedRecords; negative: no bound). See
	// Daemon's comment.
	MaxRefusedRecords int
}

// DefaultMaxRefusedRecords is how many refused calls of one connection are
// audited one by one before the rest are only counted.
const DefaultMaxRefusedRecords = 64

// refusedAuditTimeout bounds the wait for a call.refused record: the
// refusal's answer waits for it.
const refusedAuditTimeout = 10 * time.Second

// Daemon serves the tool calls of the Agent Skills runtime protocol.
//
// Every call that is refused or fails is audited. The handlers record what
// they refuse in detail (a refused read, a policy deny, a confirmation
// refusal, a run's end) and mark those errors (markAudited); every other
// error answer, including the transport's own (a line that is not JSON, an
// invalid request, an unknown method, an over-long line), gets one
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
//
// NewDaemon also hooks the stores' expiry: a session or confirmation that
// expires is audited once (session.close / confirmation.expire, outcome
// "expired").
type Daemon struct {
	cfg      *policy.Config
	skills   SkillIndex
	engine   *Engine
	sessions *SessionStore
	confirms *ConfirmationStore
	audit    Auditor
	log      hclog.Logger
	server   *Server

	runSlots  chan struct{}
	queueWait time.Duration

	refusedCap int
	refMu      sync.Mutex
	refused    map[uint64]*refusedTally // by connection; only those with refusals
}

// refusedTally counts one connection's refused calls.
type refusedTally struct {
	peer       Peer
	recorded   int
	suppressed int
	kinds      map[string]int // suppressed refusals by error kind
}

// NewDaemon builds the daemon and registers every method on its server.
func NewDaemon(o DaemonOptions) *Daemon {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	dc := o.Config.Daemon
	d := &Daemon{
		cfg:       o.Config,
		skills:    o.Skills,
		engine:    o.Engine,
		sessions:  o.Sessions,
		confirms:  o.Confirmations,
		audit:     o.Audit,
		log:       log,
		runSlots:  make(chan struct{}, max(1, dc.MaxConcurrentRuns)),
		queueWait: dc.RunQueueTimeout,

		refusedCap: o.MaxRefusedRecords,
		refused:    map[uint64]*refusedTally{},
	}
	if d.refusedCap == 0 {
		d.refusedCap = DefaultMaxRefusedRecords
	}
	if d.audit != nil {
		// A typed nil (*audit.Log)(nil) must mean "no audit", not a panic.
		if l, ok := d.audit.(*audit.Log); ok && l == nil {
			d.audit = nil
		}
	}
	d.server = NewServer(ServerOptions{
		MaxConnections: dc.MaxConnections,
		MaxLineBytes:   dc.MaxLineBytes,
		IdleTimeout:    dc.IdleTimeout,
		Logger:         log.Named("rpc"),
		OnAuthRefused:  d.authRefused,
		OnCallError:    d.callRefused,
		OnConnClosed:   d.connClosed,
	})
	if d.sessions != nil {
		d.sessions.AddExpireHook(d.sessionExpired)
	}
	if d.confirms != nil {
		d.confirms.AddExpireHook(d.confirmationExpired)
	}
	for method, h := range map[string]Handler{
		"sessions.create":       d.sessionsCreate,
		"sessions.close":        d.sessionsClose,
		"sessions.instructions": d.sessionsInstructions,
		"skills.list":           d.skillsList,
		"skills.load":           d.skillsLoad,
		"skills.unload":         d.skillsUnload,
		"skills.read":           d.skillsRead,
		"skills.run_script":     d.skillsRunScript,
		"tools.check":           d.toolsCheck,
		"confirmations.list":    d.confirmationsList,
		"confirmations.approve": d.confirmationsApprove,
		"confirmations.deny":    d.confirmationsDeny,
	} {
		d.server.Handle(method, d.guard(method, h))
	}
	return d
}

// Server exposes the JSON-RPC server (Serve, Shutdown, Listen).
func (d *Daemon) Server() *Server { return d.server }

// guard wraps every handler: it logs each failed call once, with the peer.
func (d *Daemon) guard(method string, h Handler) Handler {
	return func(ctx context.Context, call *Call) (any, error) {
		res, err := h(ctx, call)
		if err != nil {
			d.log.Debug("call failed", "method", method, "uid", call.Peer.UID, "pid", call.Peer.PID, "error", err)
		}
		return res, err
	}
}

func (d *Daemon) authRefused(p Peer, reason string) {
	d.record(context.Background(), &audit.Record{Event: audit.EventAuthRefused, Peer: auditPeer(p), Outcome: "refused", Error: reason})
}

// callRefused audits a refused or failed call that no handler audited in
// detail (see Daemon's comment), within the connection's cap.
func (d *Daemon) callRefused(ce *CallError) {
	if d.audit == nil || ce.Resp == nil || (ce.Err != nil && wasAudited(ce.Err)) {
		return
	}
	if !d.tallyRefused(ce.ConnID, ce.Peer, ce.Resp.Kind) {
		return
	}
	rec := refusedRecord(ce)
	ctx, cancel := context.WithTimeout(context.Background(), refusedAuditTimeout)
	defer cancel()
	if err := d.audit.Append(ctx, rec); err != nil {
		d.log.Warn("audit of a refused call failed", "method", rec.Method, "kind", ce.Resp.Kind, "error", err)
	}
}

// tallyRefused counts a refusal on conn and reports whether it is still
// within the connection's cap of records.
func (d *Daemon) tallyRefused(conn uint64, p Peer, kind string) bool {
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
func (d *Daemon) connClosed(conn uint64, _ Peer) {
	d.refMu.Lock()
	t := d.refused[conn]
	delete(d.refused, conn)
	d.refMu.Unlock()
	if t == nil || t.suppressed == 0 || d.audit == nil {
		return
	}
	kinds := make([]string, 0, len(t.kinds))
	for k, n := range t.kinds {
		kinds = append(kinds, k+"="+strconv.Itoa(n))
	}
	sort.Strings(kinds)
	rec := &audit.Record{
		Event: audit.EventCallRefused, Peer: auditPeer(t.peer), Outcome: "suppressed",
		Error: fmt.Sprintf("%d more calls were refused on this connection after the first %d refusals were recorded; they were only counted", t.suppressed, t.recorded),
		Detail: map[string]string{
			"conn": strconv.FormatUint(conn, 10), "suppressed": strconv.Itoa(t.suppressed),
			"recorded": strconv.Itoa(t.recorded), "kinds": strings.Join(kinds, " "),
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), refusedAuditTimeout)
	defer cancel()
	if err := d.audit.Append(ctx, rec); err != nil {
		d.log.Warn("audit of suppressed refusals failed", "conn", conn, "suppressed", t.suppressed, "error", err)
	}
}

// Bounds on client-controlled text in audit records.
const (
	maxAuditMethod    = 128
	maxAuditRequestID = 128
	maxAuditMessage   = 512
	maxAuditLineStart = 32
)

// refusedRecord is the call.refused record of ce. The params are never
// copied: a run's env values or stdin must not reach the log.
func refusedRecord(ce *CallError) *audit.Record {
	r := &audit.Record{
		Event:     audit.EventCallRefused,
		Peer:      auditPeer(ce.Peer),
		RequestID: auditRequestID(ce.ID),
		Method:    clipText(ce.Method, maxAuditMethod),
		Outcome:   audit.OutcomeRefused,
		Error:     clipText(ce.Resp.Message, maxAuditMessage),
		Detail: map[string]string{
			"kind": ce.Resp.Kind,
			"code": strconv.Itoa(ce.Resp.Code),
			"conn": strconv.FormatUint(ce.ConnID, 10),
		},
	}
	if ce.Resp.Kind == KindInternal {
		r.Outcome = audit.OutcomeError
	}
	if ce.Params != nil {
		r.SessionID = paramsSession(ce.Params)
		r.Detail["params_bytes"] = strconv.Itoa(len(ce.Params))
		r.Detail["params_sha256"] = sha256Hex(ce.Params)
	}
	if ce.Line != nil || ce.LineBytes > 0 {
		r.Detail["line_bytes"] = strconv.Itoa(ce.LineBytes)
		if len(ce.Line) == ce.LineBytes {
			r.Detail["line_sha256"] = sha256Hex(ce.Line)
		}
		if ce.Resp.Code == CodeParseError {
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
	if json.Unmarshal(params, &p) == nil && validRandomID(p.SessionID, "ses_") {
		return p.SessionID
	}
	return ""
}

// auditRequestID is a request id as audit records keep it: the raw JSON,
// clipped (ids are the client's and may be long).
func auditRequestID(id json.RawMessage) string {
	return clipText(string(id), maxAuditRequestID)
}

// clipText cuts s to at most n bytes of valid UTF-8, saying how long it was.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + fmt.Sprintf("… (%d bytes)", len(s))
}

// sessionExpired audits a session a sweep removed.
func (d *Daemon) sessionExpired(s Session) {
	d.record(context.Background(), &audit.Record{
		Event: audit.EventSessionClose, SessionID: s.ID, Outcome: "expired",
		Detail: map[string]string{"owner_uid": strconv.FormatUint(uint64(s.OwnerUID), 10), "last_used": s.LastUsed.UTC().Format(time.RFC3339)},
	})
}

// confirmationExpired audits a confirmation that timed out (once: the store
// calls this when it records the expiry).
func (d *Daemon) confirmationExpired(c Confirmation) {
	uid := c.RequestedBy
	was := string(ConfirmationPending)
	if c.DecidedAt != nil {
		was = string(ConfirmationApproved)
	}
	d.record(context.Background(), &audit.Record{
		Event: audit.EventConfirmExpire, SessionID: c.SessionID, Outcome: string(ConfirmationExpired),
		Confirmation: &audit.ConfirmationInfo{ID: c.ID, Digest: c.Digest, Rule: c.Rule, Reason: c.Reason, RequestedBy: &uid, Expires: c.Expires},
		Detail:       map[string]string{"was": was},
	})
}

// record appends to the audit log; a failure is logged, and the log's
// Healthy() makes the next run refuse.
func (d *Daemon) record(ctx context.Context, r *audit.Record) error {
	if d.audit == nil {
		return nil
	}
	if err := d.audit.Append(ctx, r); err != nil {
		d.log.Error("audit append failed", "event", r.Event, "error", err)
		return auditDown(err)
	}
	return nil
}

func auditPeer(p Peer) *audit.Peer {
	return &audit.Peer{UID: p.UID, GID: p.GID, PID: p.PID, Process: p.Process}
}

func baseRecord(call *Call, event, session string) *audit.Record {
	return &audit.Record{Event: event, Peer: auditPeer(call.Peer), SessionID: session, RequestID: auditRequestID(call.ID), Method: call.Method}
}

func (d *Daemon) session(call *Call, id string) (*Session, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: session_id is required: call sessions.create first", ErrInvalidParams)
	}
	s, err := d.sessions.Get(id, call.Peer.UID)
	if err != nil {
		// The store's not-found says why (unknown, another uid's, expired)
		// without telling which; anything else is the daemon's problem and
		// must not pass for a missing session.
		if errors.Is(err, ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: reading session %q: %v", ErrInternal, id, err)
	}
	return s, nil
}

// ---- sessions ----

func (d *Daemon) sessionsCreate(ctx context.Context, call *Call) (any, error) {
	var p struct{}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	s, err := d.sessions.Create(call.Peer.UID)
	if err != nil {
		return nil, err
	}
	if err := d.record(ctx, baseRecord(call, audit.EventSessionCreate, s.ID)); err != nil {
		// Fail closed: no session the log does not know of is left behind.
		if cerr := d.sessions.Close(s.ID, call.Peer.UID); cerr != nil {
			d.log.Error("cannot remove a session whose creation was not audited", "session", s.ID, "error", cerr)
		}
		return nil, err
	}
	return map[string]string{"session_id": s.ID}, nil
}

func (d *Daemon) sessionsClose(ctx context.Context, call *Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
	}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	if _, err := d.session(call, p.SessionID); err != nil {
		return nil, err
	}
	if err := d.sessions.Close(p.SessionID, call.Peer.UID); err != nil {
		return nil, err
	}
	d.record(ctx, baseRecord(call, audit.EventSessionClose, p.SessionID))
	return map[string]any{"closed": true}, nil
}

// instructionsRule is the per-call rule the runtime spec asks hosts to give
// their model: skills are used only after loading them.
const instructionsRule = `You can use Agent Skills. The skills available are listed in <available_skills>. ` +
	`Before you use a skill, load it with skills.load; its instructions then appear in <active_skills>. ` +
	`Read its files with skills.read and run its scripts with skills.run_script; do not guess their contents.`

func (d *Daemon) sessionsInstructions(ctx context.Context, call *Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
	}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	s, err := d.session(call, p.SessionID)
	if err != nil {
		return nil, err
	}
	available := skills.RenderAvailable(d.skills.List(), d.cfg.Skills.CatalogBudget)
	var act []*skills.Skill
	var notes []string
	for _, a := range s.Active {
		sk, err := d.skills.Get(a.Name)
		if err != nil {
			notes = append(notes, fmt.Sprintf("Skill %q is loaded but no longer available; unload it with skills.unload.", a.Name))
			continue
		}
		if sk.Digest != a.Digest {
			notes = append(notes, fmt.Sprintf("Skill %q changed on disk since it was loaded; its files cannot be read or run until it is loaded again with skills.load.", a.Name))
		}
		act = append(act, sk)
	}
	active := skills.RenderActive(act)
	text := instructionsRule + "\n\n" + available + "\n\n" + active
	if len(notes) > 0 {
		text += "\n" + strings.Join(notes, "\n") + "\n"
	}
	return client.InstructionsResult{Instructions: text, AvailableSkills: available, ActiveSkills: active}, nil
}

// ---- skills ----

func (d *Daemon) skillsList(ctx context.Context, call *Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
		Query     string `json:"query"`
	}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	if p.SessionID != "" {
		if _, err := d.session(call, p.SessionID); err != nil {
			return nil, err
		}
	}
	q := strings.ToLower(p.Query)
	out := []client.SkillInfo{}
	for _, s := range d.skills.List() {
		if q != "" && !strings.Contains(strings.ToLower(s.Name+" "+s.Description+" "+strings.Join(s.Tags, " ")), q) {
			continue
		}
		tags := s.Tags
		if tags == nil {
			tags = []string{}
		}
		out = append(out, client.SkillInfo{
			Name: s.Name, Description: s.Description, Location: s.Location, Digest: s.Digest,
			Tags: tags, ModelInvocable: !s.DisableModelInvocation,
		})
	}
	// The DESIGN's shape: a bare array, [{name, description, location,
	// digest, tags, model_invocable}], sorted by name (as the index is).
	return out, nil
}

func (d *Daemon) receipt(s *Session) (*client.LoadResult, error) {
	res := &client.LoadResult{ActiveSkills: []client.ActiveSkill{}}
	loaded := map[string]bool{}
	for _, a := range s.Active {
		loaded[a.Name] = true
	}
	for _, a := range s.Active {
		sk, err := d.skills.Get(a.Name)
		if err != nil {
			res.Hints = append(res.Hints, fmt.Sprintf("skill %q is loaded but no longer indexed; unload it", a.Name))
			continue
		}
		res.ActiveSkills = append(res.ActiveSkills, client.ActiveSkill{
			Name: sk.Name, Location: sk.Location, RootDir: sk.Dir, Digest: a.Digest, Properties: sk.Properties,
		})
		for _, r := range sk.Requires {
			if !loaded[r] {
				res.Hints = append(res.Hints, fmt.Sprintf("skill %q requires %q, which is not loaded; load it too if the task needs it", sk.Name, r))
			}
		}
	}
	return res, nil
}

func (d *Daemon) skillsLoad(ctx context.Context, call *Call) (any, error) {
	var p struct {
		SessionID string   `json:"session_id"`
		Names     []string `json:"names"`
		Mode      string   `json:"mode"`
	}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	if _, err := d.session(call, p.SessionID); err != nil {
		return nil, err
	}
	if p.Mode == "" {
		p.Mode = "replace"
	}
	if p.Mode != "replace" && p.Mode != "add" {
		return nil, fmt.Errorf("%w: mode %q: use \"replace\" (default) or \"add\"", ErrInvalidParams, p.Mode)
	}
	if len(p.Names) == 0 {
		return nil, fmt.Errorf("%w: names is empty: give the skills to load, see skills.list", ErrInvalidParams)
	}
	var found []*skills.Skill
	var missing []string
	for _, n := range p.Names {
		if err := skills.ValidName(n); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidParams, err)
		}
		sk, err := d.skills.Get(n)
		if err != nil {
			missing = append(missing, n)
			continue
		}
		found = append(found, sk)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: no skill named %s: call skills.list to see the available names", ErrNotFound, quoteList(missing))
	}
	maxActive := d.cfg.Daemon.MaxActiveSkills
	var sess *Session
	err := d.sessions.Update(p.SessionID, call.Peer.UID, func(s *Session) error {
		var next []ActiveSkill
		if p.Mode == "add" {
			next = append(next, s.Active...)
		}
		for _, sk := range found {
			kept := next[:0]
			for _, a := range next {
				if a.Name != sk.Name {
					kept = append(kept, a)
				}
			}
			next = append(kept, ActiveSkill{Name: sk.Name, Digest: sk.Digest, Dir: sk.Dir, LoadedAt: time.Now().UTC()})
		}
		if maxActive > 0 && len(next) > maxActive {
			return fmt.Errorf("%w: %d skills would be active, the limit is %d: unload some (skills.unload) or load with mode \"replace\"", ErrLimitExceeded, len(next), maxActive)
		}
		s.Active = next
		sess = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, sk := range found {
		r := baseRecord(call, audit.EventSkillLoad, p.SessionID)
		r.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
		if err := d.record(ctx, r); err != nil {
			return nil, err
		}
	}
	return d.receipt(sess)
}

func (d *Daemon) skillsUnload(ctx context.Context, call *Call) (any, error) {
	var p struct {
		SessionID string   `json:"session_id"`
		Names     []string `json:"names"`
		All       bool     `json:"all"`
	}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	if _, err := d.session(call, p.SessionID); err != nil {
		return nil, err
	}
	if !p.All && len(p.Names) == 0 {
		return nil, fmt.Errorf("%w: give names or all: true", ErrInvalidParams)
	}
	var removed []ActiveSkill
	var sess *Session
	err := d.sessions.Update(p.SessionID, call.Peer.UID, func(s *Session) error {
		drop := map[string]bool{}
		for _, n := range p.Names {
			drop[n] = true
		}
		var kept []ActiveSkill
		for _, a := range s.Active {
			if p.All || drop[a.Name] {
				removed = append(removed, a)
				delete(drop, a.Name)
			} else {
				kept = append(kept, a)
			}
		}
		if len(drop) > 0 {
			var names []string
			for n := range drop {
				names = append(names, n)
			}
			return fmt.Errorf("%w: %s not loaded in this session", ErrNotFound, quoteList(names))
		}
		s.Active = kept
		sess = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, a := range removed {
		r := baseRecord(call, audit.EventSkillUnload, p.SessionID)
		r.Skill = &audit.SkillRef{Name: a.Name, Digest: a.Digest}
		d.record(ctx, r)
	}
	return d.receipt(sess)
}

// activeSkill resolves which loaded skill a call is about: the named one, or
// the most recently loaded. It refuses a skill whose files changed since load.
func (d *Daemon) activeSkill(s *Session, name string) (*skills.Skill, error) {
	if len(s.Active) == 0 {
		return nil, fmt.Errorf("%w: no skill is loaded in this session: call skills.load first", ErrInvalidParams)
	}
	var a *ActiveSkill
	if name == "" {
		a = &s.Active[len(s.Active)-1]
	} else {
		for i := range s.Active {
			if s.Active[i].Name == name {
				a = &s.Active[i]
			}
		}
		if a == nil {
			return nil, fmt.Errorf("%w: skill %q is not loaded in this session: call skills.load with it first", ErrInvalidParams, name)
		}
	}
	sk, err := d.skills.Get(a.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: skill %q is no longer available: unload it", ErrNotFound, a.Name)
	}
	if sk.Digest != a.Digest {
		return nil, fmt.Errorf("%w: skill %q changed on disk since it was loaded (%s → %s): call skills.load again to use the new version", ErrInvalidParams, a.Name, a.Digest, sk.Digest)
	}
	return sk, nil
}

// decideTool asks policy whether the session may use tool with skill; the
// decision is audited. A deny is returned as an error.
func (d *Daemon) decideTool(ctx context.Context, call *Call, sessionID string, sk *skills.Skill, tool string, input []byte) (policy.Decision, error) {
	dec, err := d.engine.Decide(ctx, sk, tool, input, *baseRecord(call, audit.EventDecision, sessionID))
	if err != nil {
		return dec, err
	}
	if dec.Effect == policy.EffectDeny {
		// The decision record just written says why.
		return dec, markAudited(fmt.Errorf("%w: %s for skill %q: %s (%s)", ErrDenied, tool, sk.Name, dec.Reason, dec.Rule))
	}
	return dec, nil
}

func (d *Daemon) skillsRead(ctx context.Context, call *Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
		Skill     string `json:"skill"`
		Path      string `json:"path"`
		Offset    int64  `json:"offset"`
		Length    int64  `json:"length"`
	}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	s, err := d.session(call, p.SessionID)
	if err != nil {
		return nil, err
	}
	sk, err := d.activeSkill(s, p.Skill)
	if err != nil {
		return nil, err
	}
	if _, err := d.decideTool(ctx, call, p.SessionID, sk, "skills.read", nil); err != nil {
		return nil, err
	}
	rec := baseRecord(call, audit.EventSkillRead, p.SessionID)
	rec.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
	fc, err := skills.ReadFile(sk.Dir, p.Path, skills.ReadOptions{Offset: p.Offset, Length: p.Length, MaxBytes: d.cfg.Skills.MaxReadBytes})
	if err != nil {
		rec.Read = &audit.ReadInfo{Path: p.Path, Offset: p.Offset, Length: p.Length}
		rec.Outcome, rec.Error = audit.OutcomeRefused, err.Error()
		if aerr := d.record(ctx, rec); aerr != nil {
			return nil, aerr
		}
		return nil, markAudited(readError(err))
	}
	rec.Read = &audit.ReadInfo{Path: fc.Path, Offset: p.Offset, Length: p.Length, Bytes: fc.Size, Served: servedBytes(fc), SHA256: fc.SHA256, Truncated: fc.Truncated}
	rec.Outcome = audit.OutcomeOK
	if err := d.record(ctx, rec); err != nil {
		return nil, err
	}
	return client.ReadResult{Skill: sk.Name, Path: fc.Path, Size: fc.Size, SHA256: fc.SHA256, Encoding: fc.Encoding, Content: fc.Content, Truncated: fc.Truncated}, nil
}

// servedBytes is how many bytes of the file a read answer carries.
func servedBytes(fc *skills.FileContent) int64 {
	if fc.Encoding == "base64" {
		n := len(fc.Content)
		return int64(n/4*3 - (n - len(strings.TrimRight(fc.Content, "="))))
	}
	return int64(len(fc.Content))
}

func readError(err error) error {
	switch {
	case errors.Is(err, skills.ErrNotFound):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	case errors.Is(err, skills.ErrEscape), errors.Is(err, skills.ErrNotRegular), errors.Is(err, skills.ErrTooLarge):
		return fmt.Errorf("%w: %v", ErrInvalidParams, err)
	default:
		return fmt.Errorf("%w: %v", ErrInvalidParams, err)
	}
}

func (d *Daemon) skillsRunScript(ctx context.Context, call *Call) (any, error) {
	var p client.RunScriptParams
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	s, err := d.session(call, p.SessionID)
	if err != nil {
		return nil, err
	}
	sk, err := d.activeSkill(s, p.Skill)
	if err != nil {
		return nil, err
	}
	input, _ := json.Marshal(map[string]any{"path": p.Path, "args": p.Args})
	dec, err := d.decideTool(ctx, call, p.SessionID, sk, "skills.run_script", input)
	if err != nil {
		return nil, err
	}
	files := make([]runtime.InputFile, 0, len(p.Files))
	for _, f := range p.Files {
		data, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			return nil, fmt.Errorf("%w: files[%q].content is not base64: %v", ErrInvalidParams, f.Name, err)
		}
		files = append(files, runtime.InputFile{Name: f.Name, Data: data})
	}
	req := RunRequest{
		Skill: sk, Script: p.Path, Args: p.Args, Env: p.Env, Stdin: []byte(p.Stdin), Files: files,
		Limits:  runtime.Limits{Timeout: time.Duration(p.TimeoutMS) * time.Millisecond},
		Network: p.Network,
		Peer:    auditPeer(call.Peer), SessionID: p.SessionID, RequestID: string(call.ID), Method: call.Method,
	}
	if p.TimeoutMS < 0 {
		return nil, fmt.Errorf("%w: timeout_ms must not be negative", ErrInvalidParams)
	}
	plan, err := d.engine.Prepare(req)
	if err != nil {
		return nil, err
	}
	// A missing image fails now, before an approver is asked or an
	// approval is used up, and without building it inside the call.
	if err := d.engine.CheckImage(plan); err != nil {
		return nil, err
	}

	needConfirm := dec.Effect == policy.EffectConfirm
	reason, rule := dec.Reason, dec.Rule
	if plan.Network {
		nd, err := d.engine.Decide(ctx, sk, policy.NetworkTool, nil, *baseRecord(call, audit.EventDecision, p.SessionID))
		if err != nil {
			return nil, err
		}
		switch {
		case nd.Effect == policy.EffectDeny:
			return nil, markAudited(fmt.Errorf("%w: network for skill %q: %s (%s)", ErrDenied, sk.Name, nd.Reason, nd.Rule))
		case nd.Effect == policy.EffectConfirm && !needConfirm:
			needConfirm, reason, rule = true, "network access: "+nd.Reason, nd.Rule
		}
	}
	if needConfirm && p.ConfirmationID == "" {
		details := map[string]string{
			"skill": sk.Name, "skill_digest": sk.Digest, "script": plan.Script, "script_sha256": plan.ScriptSHA256,
			"args": strings.Join(quoteAll(p.Args), " "), "network": fmt.Sprint(plan.Network),
		}
		if names, _ := audit.EnvSummary(p.Env); len(names) > 0 {
			details["env_names"] = strings.Join(names, " ")
		}
		c, err := d.confirms.Request(p.SessionID, call.Peer.UID, plan.Digest, reason, rule, d.cfg.Daemon.ConfirmationTTL, WithDetails(details))
		if err != nil {
			return nil, err
		}
		r := baseRecord(call, audit.EventConfirmRequest, p.SessionID)
		r.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
		uid := call.Peer.UID
		r.Confirmation = &audit.ConfirmationInfo{ID: c.ID, Digest: plan.Digest, Rule: rule, Reason: reason, RequestedBy: &uid, Expires: c.Expires}
		r.Run = &audit.RunInfo{Script: plan.Script, ScriptSHA256: plan.ScriptSHA256, Args: p.Args, Network: plan.Network, Digest: plan.Digest}
		r.Outcome = string(c.State)
		if err := d.record(ctx, r); err != nil {
			return nil, err
		}
		return nil, markAudited(&ConfirmationRequiredError{ID: c.ID, Reason: reason, Rule: rule, Digest: plan.Digest})
	}

	// Take a run slot and make sure the run can be audited before an
	// approval is used up, so a busy or failing daemon does not burn it.
	release, err := d.acquireRunSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if d.audit != nil {
		if err := d.audit.Healthy(); err != nil {
			return nil, auditDown(err)
		}
	}

	if p.ConfirmationID != "" {
		// An id on a call that needs none is still checked: a host that
		// sends one expects it to be honoured, not silently ignored.
		r := baseRecord(call, audit.EventConfirmUse, p.SessionID)
		r.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
		r.Confirmation = &audit.ConfirmationInfo{ID: p.ConfirmationID, Digest: plan.Digest}
		if err := d.confirms.Consume(p.ConfirmationID, p.SessionID, plan.Digest); err != nil {
			r.Outcome, r.Error = audit.OutcomeRefused, err.Error()
			if aerr := d.record(ctx, r); aerr != nil {
				return nil, aerr
			}
			return nil, markAudited(err)
		}
		r.Outcome = string(ConfirmationUsed)
		if err := d.record(ctx, r); err != nil {
			return nil, err
		}
		plan.Request.ConfirmationID = p.ConfirmationID
	}

	out, err := d.engine.Execute(ctx, plan)
	if err != nil {
		return nil, err
	}
	return ResultOf(out, true), nil
}

// acquireRunSlot bounds concurrent runs; a run waits briefly for a slot and
// then fails limit_exceeded so a host can back off.
func (d *Daemon) acquireRunSlot(ctx context.Context) (func(), error) {
	wait := d.queueWait
	if wait <= 0 {
		wait = 5 * time.Second
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case d.runSlots <- struct{}{}:
		return func() { <-d.runSlots }, nil
	case <-t.C:
		return nil, fmt.Errorf("%w: %d runs are already in progress (max_concurrent_runs); retry shortly", ErrLimitExceeded, cap(d.runSlots))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Result is the wire form of a finished run (skills.run_script's result and
// `skillbox run --json`).
type Result = client.RunScriptResult

// ResultOf turns an outcome into its wire form; output file contents are
// included (base64) only when withContent is set.
func ResultOf(o *Outcome, withContent bool) Result {
	r := o.Result
	res := Result{
		RunID: o.RunID, Path: o.Plan.Script, ExitCode: r.ExitCode, Signal: r.Signal,
		Stdout: string(r.Stdout), Stderr: string(r.Stderr),
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		DurationMS: r.Duration.Milliseconds(), Reason: string(r.Reason),
		Image: o.Image.Name, ImageDigest: o.Image.Digest, Runtime: r.Runtime,
	}
	for _, f := range r.Outputs {
		out := client.Output{Path: f.Path, Size: f.Size, SHA256: f.SHA256}
		if withContent {
			out.Content = base64.StdEncoding.EncodeToString(f.Data)
		}
		res.Outputs = append(res.Outputs, out)
	}
	return res
}

// ---- tools.check ----

func (d *Daemon) toolsCheck(ctx context.Context, call *Call) (any, error) {
	var p struct {
		SessionID string          `json:"session_id"`
		Tool      string          `json:"tool"`
		Input     json.RawMessage `json:"input"`
	}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	if p.Tool == "" {
		return nil, fmt.Errorf("%w: tool is required, e.g. \"Bash\" or \"skills.run_script\"", ErrInvalidParams)
	}
	s, err := d.session(call, p.SessionID)
	if err != nil {
		return nil, err
	}
	if len(s.Active) == 0 {
		return client.CheckToolResult{Decision: string(policy.EffectAllow), Rule: "no skills are active in this session",
			Reason: "tools.check only constrains tools while skills are loaded"}, nil
	}
	// Every active skill constrains the host's tools; the strictest wins. A
	// loaded skill that is gone or changed on disk cannot vouch for
	// anything: fail closed until it is unloaded or loaded again.
	var decs []policy.Decision
	for _, a := range s.Active {
		sk, err := d.skills.Get(a.Name)
		if err != nil {
			decs = append(decs, policy.Decision{Effect: policy.EffectDeny, Rule: fmt.Sprintf("skill %q", a.Name),
				Reason: fmt.Sprintf("skill %q is loaded but no longer available; unload it (skills.unload)", a.Name)})
			continue
		}
		if sk.Digest != a.Digest {
			decs = append(decs, policy.Decision{Effect: policy.EffectDeny, Rule: fmt.Sprintf("skill %q", a.Name),
				Reason: fmt.Sprintf("skill %q changed on disk since it was loaded; load it again (skills.load)", a.Name)})
			continue
		}
		dec, err := d.engine.Decide(ctx, sk, p.Tool, p.Input, *baseRecord(call, audit.EventDecision, p.SessionID))
		if err != nil {
			return nil, err
		}
		decs = append(decs, dec)
	}
	best := policy.Strictest(decs...)
	return client.CheckToolResult{Decision: string(best.Effect), Rule: best.Rule, Reason: best.Reason}, nil
}

// ---- confirmations ----

func (d *Daemon) isApprover(p Peer) bool {
	name := ""
	if u, err := user.LookupId(strconv.FormatUint(uint64(p.UID), 10)); err == nil {
		name = u.Username
	}
	return d.cfg.IsApprover(p.UID, name)
}

func (d *Daemon) confirmationsList(ctx context.Context, call *Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
		State     string `json:"state"`
	}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	all, err := d.confirms.List(ConfirmationFilter{SessionID: p.SessionID, State: p.State})
	if err != nil {
		return nil, err
	}
	// Approvers see every request; others only their own.
	approver := d.isApprover(call.Peer)
	out := []*Confirmation{}
	for _, c := range all {
		if approver || c.RequestedBy == call.Peer.UID {
			out = append(out, c)
		}
	}
	return map[string]any{"confirmations": out}, nil
}

func (d *Daemon) decideConfirmation(ctx context.Context, call *Call, approve bool) (any, error) {
	var p struct {
		ID string `json:"id"`
	}
	if err := call.Bind(&p); err != nil {
		return nil, err
	}
	event := audit.EventConfirmApprove
	if !approve {
		event = audit.EventConfirmDeny
	}
	r := baseRecord(call, event, "")
	r.Confirmation = &audit.ConfirmationInfo{ID: p.ID}
	if !d.isApprover(call.Peer) {
		r.Outcome, r.Error = "refused", "not an approver"
		err := fmt.Errorf("%w: uid %d is not an approver: the config's daemon.approvers names who may approve", ErrDenied, call.Peer.UID)
		if d.record(ctx, r) == nil {
			err = markAudited(err)
		}
		return nil, err
	}
	var c *Confirmation
	var err error
	if approve {
		c, err = d.confirms.Approve(p.ID, call.Peer)
	} else {
		c, err = d.confirms.Deny(p.ID, call.Peer)
	}
	if err != nil {
		r.Outcome, r.Error = "refused", err.Error()
		if d.record(ctx, r) == nil {
			err = markAudited(err)
		}
		return nil, err
	}
	r.SessionID = c.SessionID
	r.Confirmation.Digest, r.Confirmation.Rule, r.Confirmation.Reason = c.Digest, c.Rule, c.Reason
	r.Outcome = string(c.State)
	if err := d.record(ctx, r); err != nil {
		return nil, err
	}
	return c, nil
}

func (d *Daemon) confirmationsApprove(ctx context.Context, call *Call) (any, error) {
	return d.decideConfirmation(ctx, call, true)
}

func (d *Daemon) confirmationsDeny(ctx context.Context, call *Call) (any, error) {
	return d.decideConfirmation(ctx, call, false)
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
