// Package service is skillbox's transport-free core: sessions of loaded
// skills, the tool calls of sandbox/api as Go methods, and the one
// authorization path every run takes (policy decision, the skill's
// allowed-tools, confirmation, audit) whichever front end asked: the
// JSON-RPC daemon, the MCP server or `skillbox run`. The run engine below it
// (sandbox/runner) turns an authorized request into one sandboxed run; the
// service owns the audit log and writes it through the same runner.Journal
// as the engine. Calls may emit events (run output while a script runs) to
// a sink the front end puts in ctx.
package service

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/sandbox/runner"
	"github.com/skillbox/skillbox/sandbox/store"
	"github.com/skillbox/skillbox/sandbox/workspace"
	"github.com/skillbox/skillbox/skills"
)

// SkillIndex is what the service needs of the registry.
type SkillIndex interface {
	Get(name string) (*skills.Skill, error)
	List() []*skills.Skill
}

// Reloader is a SkillIndex that can index its roots again (the registry):
// an applied proposal is seen at once.
type Reloader interface {
	Reload(ctx context.Context) error
}

var _ Reloader = (*skills.Registry)(nil)

// Options wire a Service; the caller owns the parts' lifetimes.
type Options struct {
	Config *policy.Config
	Skills SkillIndex
	Engine *runner.Engine
	// Sessions and Confirmations may be nil for a service that only runs
	// (`skillbox run`); the calls that need them are then unavailable.
	Sessions      *store.SessionStore
	Confirmations *store.ConfirmationStore
	// Audit is the audit log's one writer, the same one the Engine
	// writes its runs' records through (the stack makes it); nil means
	// none (tests, a local run without an audit dir). Audited calls, runs
	// included, are refused while it is unhealthy.
	Audit runner.Recorder
	// Logger is the parent logger; the service names its own.
	Logger hclog.Logger
	// Proposals keeps skills.propose's proposals; nil makes those calls
	// unavailable.
	Proposals *store.ProposalStore
	// HostWorkspaces says which host directories a call may name as its
	// run's workspace (see HostWorkspacePolicy); the zero value refuses
	// them all.
	HostWorkspaces HostWorkspacePolicy
	// SessionWorkspaces is the directory of the sessions' own workspaces
	// (state_dir/workspaces; "": none), WorkspaceQuota what one may hold,
	// WorkspaceQuotaPerUID what all of one uid's hold together and
	// WorkspaceQuotaTotal what all of them hold (0: no bound).
	SessionWorkspaces    string
	WorkspaceQuota       int64
	WorkspaceQuotaPerUID int64
	WorkspaceQuotaTotal  int64

	// Locker serialises lock file writes and proposal applies across the
	// daemons sharing the state store; nil: within this process only.
	Locker store.Locker

	// Metrics hears what the service decides that no audit record
	// times; nil hears nothing. The rest of the daemon's metrics come
	// from the audit records (runner.AppendObserver).
	Metrics Metrics
}

// Metrics is what the service tells the daemon's metrics (sandbox/metrics).
type Metrics interface {
	// ConfirmationDecided: an approver approved or denied c (its
	// Created and DecidedAt say how long it waited).
	ConfirmationDecided(c *api.Confirmation)
}

// Service serves the tool calls; it implements api.Service. Every method
// takes the caller's identity (the kernel's, for the socket) and audits
// what it decides.
type Service struct {
	cfg      *policy.Config
	skills   SkillIndex
	engine   *runner.Engine
	sessions *store.SessionStore
	confirms *store.ConfirmationStore
	journal  runner.Recorder
	log      hclog.Logger

	runSlots *runSlots
	// auditReads caps concurrent audit reads; auditIdx (under auditMu) is
	// the index they are served from.
	auditReads auditReads
	auditMu    sync.Mutex
	auditIdx   *rootIndex
	reads      *readAudit
	refusals   *refusalAudit
	queueWait  time.Duration
	runs       runRegistry
	grants     egressGrants

	proposals *store.ProposalStore
	hostWS    HostWorkspacePolicy
	sessionWS string // the sessions' workspaces ("": none)
	wsQuota   int64
	wsOpen    sessionWorkspaces
	wsBudget  *workspace.Budget // what session workspaces hold per uid and in all
	locks     lockCache
	lockMu    sync.Mutex // lock file writes and proposal applies

	shared store.Locker // the same across replicas, when set

	metrics Metrics // nil: none
}

var _ api.Service = (*Service)(nil)

// New builds the service. It hooks the stores' expiry, so that a session
// or confirmation that expires is audited once (session.close /
// confirmation.expire, outcome "expired").
func New(o Options) *Service {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	dc := o.Config.Daemon
	s := &Service{
		cfg:       o.Config,
		skills:    o.Skills,
		engine:    o.Engine,
		sessions:  o.Sessions,
		confirms:  o.Confirmations,
		journal:   o.Audit,
		metrics:   o.Metrics,
		log:       log.Named("service"),
		runSlots:  newRunSlots(dc.MaxConcurrentRuns, dc.ApproverRuns, dc.MaxRunsPerUID, dc.MaxQueuedRunsPerUID),
		queueWait: dc.RunQueueTimeout,
		runs:      runRegistry{runs: map[string]*activeRun{}},
		proposals: o.Proposals,
		hostWS:    o.HostWorkspaces,
		sessionWS: o.SessionWorkspaces,
		wsQuota:   o.WorkspaceQuota,
		wsBudget:  workspace.NewBudget(o.WorkspaceQuotaPerUID, o.WorkspaceQuotaTotal),
		shared:    o.Locker,
	}
	if s.journal == nil {
		s.journal = runner.NewJournal(nil, nil)
	}
	s.reads = newReadAudit(o.Config.Audit.ReadsPerInterval, o.Config.Audit.AggregateInterval, s.writeAggregate)
	s.refusals = newRefusalAudit(o.Config.Audit.AggregateInterval, s.writeAggregate)
	if s.sessions != nil {
		s.sessions.AddExpireHook(s.sessionExpired)
	}
	if s.confirms != nil {
		s.confirms.AddExpireHook(s.confirmationExpired)
	}
	return s
}

// Engine is the engine the service runs with.
func (s *Service) Engine() *runner.Engine { return s.engine }

// Journal is the audit log's one writer, which the service owns; front
// ends that audit what they refuse themselves (the daemon's socket) write
// through it too.
func (s *Service) Journal() runner.Recorder { return s.journal }

// ---- audit helpers ----

// maxAuditRequestID bounds a request id in audit records (ids are the
// client's and may be long).
const maxAuditRequestID = 128

// AuditRequestID is a front end's request id as audit records keep it:
// clipped to 128 bytes.
func AuditRequestID(id string) string { return runner.ClipText(id, maxAuditRequestID) }

// base is the record every audited call starts from: who asked, in which
// session, with which request.
func base(ctx context.Context, caller api.Peer, method, event, session string) *audit.Record {
	p := caller
	return &audit.Record{Event: event, Peer: &p, SessionID: session, RequestID: AuditRequestID(api.RequestIDFrom(ctx)), Method: method}
}

// record appends to the audit log through the one journal; a failure is
// logged there and returned as the refusal.
func (s *Service) record(ctx context.Context, r *audit.Record) error {
	return s.journal.Record(ctx, r)
}

// sessionExpired audits a session a sweep removed.
func (s *Service) sessionExpired(ses store.Session) {
	s.grants.forget(ses.ID)
	s.engine.Sessions().CloseSession(context.Background(), ses.ID, "session expired")
	s.removeSessionWorkspace(ses.ID)
	s.record(context.Background(), &audit.Record{
		Event: audit.EventSessionClose, SessionID: ses.ID, Outcome: "expired",
		Detail: map[string]string{"owner_uid": strconv.FormatUint(uint64(ses.OwnerUID), 10), "last_used": ses.LastUsed.UTC().Format(time.RFC3339)},
	})
}

// confirmationExpired audits a confirmation that timed out (once: the store
// calls this when it records the expiry).
func (s *Service) confirmationExpired(c api.Confirmation) {
	uid := c.RequestedBy
	was := string(api.ConfirmationPending)
	if c.DecidedAt != nil {
		was = string(api.ConfirmationApproved)
	}
	s.record(context.Background(), &audit.Record{
		Event: audit.EventConfirmExpire, SessionID: c.SessionID, Outcome: string(api.ConfirmationExpired),
		Confirmation: &audit.ConfirmationInfo{ID: c.ID, Digest: c.Digest, Rule: c.Rule, Reason: c.Reason, RequestedBy: &uid, Expires: c.Expires},
		Detail:       map[string]string{"was": was},
	})
}

// ---- errors ----

// foreignKinds gives the errors of the packages below the service their
// kind, so nothing they return leaves the service unclassified.
var foreignKinds = []struct{ err, kind error }{
	{skills.ErrNotFound, api.ErrNotFound},
	{skills.ErrBadName, api.ErrInvalidParams},
	{skills.ErrConflict, api.ErrDenied},
	{skills.ErrEscape, api.ErrInvalidParams},
	{skills.ErrNotRegular, api.ErrInvalidParams},
	{skills.ErrTooLarge, api.ErrInvalidParams},
	{policy.ErrDenied, api.ErrDenied},
	{runtime.ErrUnavailable, api.ErrUnavailable},
	{runtime.ErrInvalidJob, api.ErrInvalidParams},
	{audit.ErrUnavailable, api.ErrUnavailable},
}

// kindError adds a kind sentinel to an error without changing its text.
type kindError struct{ err, kind error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.err, e.kind} }

// classify makes sure err carries an api kind: one of its own, or that of
// a sentinel of the packages below.
func classify(err error) error {
	if err == nil || api.KindOf(err) != api.KindInternal || errors.Is(err, api.ErrInternal) {
		return err
	}
	for _, f := range foreignKinds {
		if errors.Is(err, f.err) {
			return &kindError{err: err, kind: f.kind}
		}
	}
	return err
}

// ---- sessions ----

func (s *Service) session(caller api.Peer, id string) (*store.Session, error) {
	if s.sessions == nil {
		return nil, errkind.Errorf(api.ErrUnavailable, "this skillbox keeps no sessions (use the daemon)")
	}
	if id == "" {
		return nil, errkind.Errorf(api.ErrInvalidParams, "session_id is required: call sessions.create first")
	}
	ses, err := s.sessions.Get(id, caller.UID)
	if err != nil {
		// The store's not-found says why (unknown, another uid's, expired)
		// without telling which; anything else is skillbox's problem and
		// must not pass for a missing session.
		if errors.Is(err, api.ErrNotFound) {
			return nil, err
		}
		return nil, errkind.Errorf(api.ErrInternal, "reading session %q: %w", id, err)
	}
	return ses, nil
}

// CreateSession implements api.Service.
func (s *Service) CreateSession(ctx context.Context, caller api.Peer, p api.CreateSessionParams) (*api.CreateSessionResult, error) {
	if s.sessions == nil {
		return nil, errkind.Errorf(api.ErrUnavailable, "this skillbox keeps no sessions (use the daemon)")
	}
	bound, err := s.boundSkills(p)
	if err != nil {
		return nil, err
	}
	ses, err := s.sessions.Create(caller.UID)
	if err != nil {
		return nil, err
	}
	if err := s.record(ctx, base(ctx, caller, api.MethodSessionsCreate, audit.EventSessionCreate, ses.ID)); err != nil {
		// Fail closed: no session the log does not know of is left behind.
		if cerr := s.sessions.Close(ses.ID, caller.UID); cerr != nil {
			s.log.Error("cannot remove a session whose creation was not audited", "session", ses.ID, "error", cerr)
		}
		return nil, err
	}
	if len(bound) > 0 {
		if err := s.loadBound(ctx, caller, ses.ID, p.Agent, bound); err != nil {
			return nil, err
		}
	}
	return &api.CreateSessionResult{SessionID: ses.ID}, nil
}

// CloseSession implements api.Service.
func (s *Service) CloseSession(ctx context.Context, caller api.Peer, p api.SessionParams) (*api.CloseSessionResult, error) {
	if _, err := s.session(caller, p.SessionID); err != nil {
		return nil, err
	}
	if err := s.sessions.Close(p.SessionID, caller.UID); err != nil {
		return nil, err
	}
	s.grants.forget(p.SessionID)
	s.engine.Sessions().CloseSession(ctx, p.SessionID, "session closed")
	s.removeSessionWorkspace(p.SessionID)
	s.record(ctx, base(ctx, caller, api.MethodSessionsClose, audit.EventSessionClose, p.SessionID))
	return &api.CloseSessionResult{Closed: true}, nil
}

// instructionsRule is the per-call rule the runtime spec asks hosts to give
// their model: skills are used only after loading them.
const instructionsRule = `You can use Agent Skills. The skills available are listed in <available_skills>. ` +
	`Before you use a skill, load it with skills.load; its instructions then appear in <active_skills>. ` +
	`Read its files with skills.read and run its scripts with skills.run_script; do not guess their contents.`

// Instructions implements api.Service.
func (s *Service) Instructions(ctx context.Context, caller api.Peer, p api.SessionParams) (*api.InstructionsResult, error) {
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	available := s.catalog()
	var act []*skills.Skill
	var notes []string
	for _, a := range ses.Active {
		sk, err := s.skills.Get(a.Name)
		if err != nil {
			notes = append(notes, fmt.Sprintf("Skill %q is loaded but no longer available; unload it with skills.unload.", a.Name))
			continue
		}
		if sk.Digest != a.Digest {
			notes = append(notes, fmt.Sprintf("Skill %q changed on disk since it was loaded; its files cannot be read or run until it is loaded again with skills.load.", a.Name))
			// Render the version the receipt names, never the edited file.
			body, ok := s.pinnedBody(a.Digest)
			if !ok {
				notes = append(notes, fmt.Sprintf("The instructions of skill %q as loaded are not available; load it again to see the current ones.", a.Name))
				continue
			}
			pinned := *sk
			pinned.Body = body
			sk = &pinned
		}
		act = append(act, sk)
	}
	active := skills.RenderActive(act)
	mounts, mountText := skillMounts(act)
	text := instructionsRule + "\n\n" + available + "\n\n" + active + mountText
	if len(notes) > 0 {
		text += "\n" + strings.Join(notes, "\n") + "\n"
	}
	return &api.InstructionsResult{Instructions: text, AvailableSkills: available, ActiveSkills: active, SkillMounts: mounts}, nil
}

// SnapshotLookup finds the pinned copy of a skill version by digest; the
// SnapshotStore implements it.
type SnapshotLookup interface {
	Lookup(digest string) (string, bool)
}

// snapshotOf is the pinned copy of the version with digest, if the
// pinner keeps one.
func (s *Service) snapshotOf(digest string) (string, bool) {
	if s.engine == nil {
		return "", false
	}
	l, ok := s.engine.Pins().(SnapshotLookup)
	if !ok {
		return "", false
	}
	return l.Lookup(digest)
}

// pinnedBody is the SKILL.md body of the pinned copy of the version with
// digest, if the pinner keeps one.
func (s *Service) pinnedBody(digest string) (string, bool) {
	dir, ok := s.snapshotOf(digest)
	if !ok {
		return "", false
	}
	f, err := skills.OpenInRoot(dir, "SKILL.md")
	if err != nil {
		return "", false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSkillMDBytes))
	if err != nil {
		return "", false
	}
	doc, err := skills.Parse(data)
	if err != nil {
		return "", false
	}
	return doc.Body, true
}

// maxSkillMDBytes bounds a SKILL.md read back from a pinned copy.
const maxSkillMDBytes = 4 << 20

// ---- skills ----

// ListSkills implements api.Service: every indexed skill matching the
// query, sorted by name (as the index is), model-invocable or not.
func (s *Service) ListSkills(ctx context.Context, caller api.Peer, p api.ListSkillsParams) ([]api.SkillInfo, error) {
	if p.SessionID != "" {
		if _, err := s.session(caller, p.SessionID); err != nil {
			return nil, err
		}
	}
	q := strings.ToLower(p.Query)
	out := []api.SkillInfo{}
	for _, sk := range s.skills.List() {
		if q != "" && !strings.Contains(strings.ToLower(sk.Name+" "+sk.Description+" "+strings.Join(sk.Tags, " ")), q) {
			continue
		}
		tags := sk.Tags
		if tags == nil {
			tags = []string{}
		}
		out = append(out, api.SkillInfo{
			Name: sk.Name, Description: sk.Description, Location: sk.Location, Digest: sk.Digest,
			Tags: tags, ModelInvocable: !sk.DisableModelInvocation, UserInvocable: sk.UserInvocable(),
			Tokens: skills.CatalogEntryTokens(sk), BodyTokens: skills.EstimateTokens(sk.Body),
		})
	}
	return out, nil
}

func (s *Service) receipt(ses *store.Session) *api.LoadResult {
	res := &api.LoadResult{ActiveSkills: []api.ActiveSkill{}}
	loaded := map[string]bool{}
	for _, a := range ses.Active {
		loaded[a.Name] = true
	}
	for _, a := range ses.Active {
		sk, err := s.skills.Get(a.Name)
		if err != nil {
			res.Hints = append(res.Hints, fmt.Sprintf("skill %q is loaded but no longer indexed; unload it", a.Name))
			continue
		}
		res.ActiveSkills = append(res.ActiveSkills, api.ActiveSkill{
			Name: sk.Name, Location: sk.Location, RootDir: sk.Dir, Digest: a.Digest, Properties: sk.Properties,
			Tokens: skills.EstimateTokens(sk.Body),
		})
		for _, r := range sk.Requires {
			if !loaded[r] {
				res.Hints = append(res.Hints, fmt.Sprintf("skill %q requires %q, which is not loaded; load it too if the task needs it", sk.Name, r))
			}
		}
	}
	return res
}

// LoadSkills implements api.Service.
func (s *Service) LoadSkills(ctx context.Context, caller api.Peer, p api.LoadParams) (*api.LoadResult, error) {
	if _, err := s.session(caller, p.SessionID); err != nil {
		return nil, err
	}
	if p.Mode == "" {
		p.Mode = api.LoadReplace
	}
	if p.Mode != api.LoadReplace && p.Mode != api.LoadAdd {
		return nil, errkind.Errorf(api.ErrInvalidParams, "mode %q: use \"replace\" (default) or \"add\"", p.Mode)
	}
	if len(p.Names) == 0 {
		return nil, errkind.Errorf(api.ErrInvalidParams, "names is empty: give the skills to load, see skills.list")
	}
	var found []*skills.Skill
	var missing []string
	for _, n := range p.Names {
		if err := skills.ValidName(n); err != nil {
			return nil, errkind.Wrap(api.ErrInvalidParams, err)
		}
		sk, err := s.skills.Get(n)
		if errors.Is(err, skills.ErrConflict) {
			// Two skill directories claim the name: neither is loaded,
			// whichever the policy for the name was written for.
			return nil, errkind.Wrap(api.ErrDenied, err)
		}
		if err != nil {
			missing = append(missing, n)
			continue
		}
		if sk.Name != skills.NormalizeName(n) {
			// Policy, locks and approvals go by the name: never load a
			// skill under a name other than its own.
			return nil, errkind.Errorf(api.ErrInternal, "asked for skill %q, the index returned %q (%s)", n, sk.Name, sk.Dir)
		}
		found = append(found, sk)
	}
	if len(missing) > 0 {
		return nil, errkind.Errorf(api.ErrNotFound, "no skill named %s: call skills.list to see the available names", quoteList(missing))
	}
	for _, sk := range found {
		if err := s.checkLock(ctx, caller, api.MethodSkillsLoad, p.SessionID, sk); err != nil {
			return nil, err
		}
	}
	// Keep a copy of each version loaded, so that what is rendered and run
	// later is this version even if the files change (see pinnedBody).
	if s.engine != nil && s.engine.Pins() != nil {
		for _, sk := range found {
			if _, err := s.engine.Pins().Pin(sk); err != nil {
				s.log.Warn("could not keep a copy of the loaded skill version", "skill", sk.Name, "digest", sk.Digest, "error", err)
			}
		}
	}
	maxActive := s.cfg.Daemon.MaxActiveSkills
	var sess *store.Session
	err := s.sessions.Update(p.SessionID, caller.UID, func(ses *store.Session) error {
		var next []store.ActiveSkill
		if p.Mode == api.LoadAdd {
			next = append(next, ses.Active...)
		}
		for _, sk := range found {
			kept := next[:0]
			for _, a := range next {
				if a.Name != sk.Name {
					kept = append(kept, a)
				}
			}
			next = append(kept, store.ActiveSkill{Name: sk.Name, Digest: sk.Digest, Dir: sk.Dir, LoadedAt: time.Now().UTC()})
		}
		if maxActive > 0 && len(next) > maxActive {
			return errkind.Errorf(api.ErrLimitExceeded, "%d skills would be active, the limit is %d: unload some (skills.unload) or load with mode \"replace\"", len(next), maxActive)
		}
		ses.Active = next
		sess = ses
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.engine.WarmSkills(found)
	for _, sk := range found {
		r := base(ctx, caller, api.MethodSkillsLoad, audit.EventSkillLoad, p.SessionID)
		r.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
		if err := s.record(ctx, r); err != nil {
			return nil, err
		}
	}
	res := s.receipt(sess)
	s.loadDeps(found, res)
	return res, nil
}

// UnloadSkills implements api.Service.
func (s *Service) UnloadSkills(ctx context.Context, caller api.Peer, p api.UnloadParams) (*api.LoadResult, error) {
	if _, err := s.session(caller, p.SessionID); err != nil {
		return nil, err
	}
	if !p.All && len(p.Names) == 0 {
		return nil, errkind.Errorf(api.ErrInvalidParams, "give names or all: true")
	}
	var removed []store.ActiveSkill
	var sess *store.Session
	err := s.sessions.Update(p.SessionID, caller.UID, func(ses *store.Session) error {
		removed = nil // fn runs again when another replica changed the session
		drop := map[string]bool{}
		for _, n := range p.Names {
			drop[n] = true
		}
		var kept []store.ActiveSkill
		for _, a := range ses.Active {
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
			return errkind.Errorf(api.ErrNotFound, "%s not loaded in this session", quoteList(names))
		}
		ses.Active = kept
		sess = ses
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, a := range removed {
		r := base(ctx, caller, api.MethodSkillsUnload, audit.EventSkillUnload, p.SessionID)
		r.Skill = &audit.SkillRef{Name: a.Name, Digest: a.Digest}
		s.record(ctx, r)
	}
	return s.receipt(sess), nil
}

// activeSkill resolves which loaded skill a call is about: the named one, or
// the most recently loaded. It refuses a skill whose files changed since load.
func (s *Service) activeSkill(ses *store.Session, name string) (*skills.Skill, error) {
	if len(ses.Active) == 0 {
		return nil, errkind.Errorf(api.ErrInvalidParams, "no skill is loaded in this session: call skills.load first")
	}
	var a *store.ActiveSkill
	if name == "" {
		a = &ses.Active[len(ses.Active)-1]
	} else {
		for i := range ses.Active {
			if ses.Active[i].Name == name {
				a = &ses.Active[i]
			}
		}
		if a == nil {
			return nil, errkind.Errorf(api.ErrInvalidParams, "skill %q is not loaded in this session: call skills.load with it first", name)
		}
	}
	sk, err := s.skills.Get(a.Name)
	if errors.Is(err, skills.ErrConflict) {
		return nil, errkind.Errorf(api.ErrDenied, "skill %q was loaded, but now %w", a.Name, err)
	}
	if err != nil {
		return nil, errkind.Errorf(api.ErrNotFound, "skill %q is no longer available: unload it", a.Name)
	}
	if sk.Digest != a.Digest {
		return nil, errkind.Errorf(api.ErrInvalidParams, "skill %q changed on disk since it was loaded (%s → %s): call skills.load again to use the new version", a.Name, a.Digest, sk.Digest)
	}
	if a.Dir != "" && sk.Dir != a.Dir {
		// Same bytes, other directory (a later root now provides the
		// name): still another skill than the one loaded.
		return nil, errkind.Errorf(api.ErrInvalidParams, "skill %q now comes from %s, not %s where it was loaded from: call skills.load again to use it", a.Name, sk.Dir, a.Dir)
	}
	return sk, nil
}

// ReadSkillFile implements api.Service: a path-confined, size-capped read
// of a loaded skill's file, after policy allowed skills.read for it.
func (s *Service) ReadSkillFile(ctx context.Context, caller api.Peer, p api.ReadParams) (*api.ReadResult, error) {
	const method = api.MethodSkillsRead
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	sk, err := s.activeSkill(ses, p.Skill)
	if err != nil {
		return nil, err
	}
	// The decision is recorded with the read's outcome: one by one for a
	// deny or a refused read, within the uid's budget otherwise (readAudit).
	dec, drec := s.decision(sk, method, nil, *base(ctx, caller, method, audit.EventDecision, p.SessionID))
	if dec.Effect == policy.EffectDeny {
		if err := s.record(ctx, drec); err != nil {
			return nil, err
		}
		return nil, api.MarkAudited(errkind.Errorf(api.ErrDenied, "%s for skill %q is denied by %s: %s", method, sk.Name, dec.Rule, dec.Why()))
	}
	rec := base(ctx, caller, method, audit.EventSkillRead, p.SessionID)
	rec.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
	fc, err := skills.ReadFile(sk.Dir, p.Path, skills.ReadOptions{Offset: p.Offset, Length: p.Length, MaxBytes: s.cfg.Skills.MaxReadBytes})
	if err != nil {
		rec.Read = &audit.ReadInfo{Path: p.Path, Offset: p.Offset, Length: p.Length}
		rec.Outcome, rec.Error = audit.OutcomeRefused, err.Error()
		if aerr := s.record(ctx, drec); aerr != nil {
			return nil, aerr
		}
		if aerr := s.record(ctx, rec); aerr != nil {
			return nil, aerr
		}
		return nil, api.MarkAudited(readError(err))
	}
	rec.Read = &audit.ReadInfo{Path: fc.Path, Offset: p.Offset, Length: p.Length, Bytes: fc.Size, Served: servedBytes(fc), SHA256: fc.SHA256, Truncated: fc.Truncated}
	rec.Outcome = audit.OutcomeOK
	if s.allowRead(caller, sk.Name, fc.Path, rec.Read.Served) {
		if err := s.record(ctx, drec); err != nil {
			return nil, err
		}
		if err := s.record(ctx, rec); err != nil {
			return nil, err
		}
	} else if err := s.journal.Check(); err != nil {
		// Counted, not recorded: the log must still be writable, or the
		// read is refused like any audited call (fail closed).
		return nil, err
	}
	return &api.ReadResult{Skill: sk.Name, Path: fc.Path, Size: fc.Size, SHA256: fc.SHA256, Encoding: fc.Encoding, Content: fc.Content, Truncated: fc.Truncated,
		Tokens: skills.EstimateTokens(fc.Content)}, nil
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
	if errors.Is(err, skills.ErrNotFound) {
		return errkind.Wrap(api.ErrNotFound, err)
	}
	return errkind.Wrap(api.ErrInvalidParams, err)
}

// ---- tools.check ----

// CheckTool implements api.Service: may the host call one of its own tools
// while the session's skills are active? The strictest decision of the
// active skills wins.
func (s *Service) CheckTool(ctx context.Context, caller api.Peer, p api.CheckToolParams) (*api.CheckToolResult, error) {
	if p.Tool == "" {
		return nil, errkind.Errorf(api.ErrInvalidParams, "tool is required, e.g. \"Bash\" or \"skills.run_script\"")
	}
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	best, err := s.decideHostTool(ctx, caller, api.MethodToolsCheck, ses, p.Tool, p.Input)
	if err != nil {
		return nil, err
	}
	if len(ses.Active) > 0 && best.Effect != policy.EffectDeny {
		// Hooks may narrow what policy allows, never widen it.
		hd, err := s.preToolUseHooks(ctx, caller, ses, p)
		if err != nil {
			return nil, err
		}
		best = policy.Strictest(append([]policy.Decision{best}, hd...)...)
	}
	return &api.CheckToolResult{Decision: string(best.Effect), Rule: best.Rule, Reason: best.Why()}, nil
}

// decideHostTool is policy's decision on a host's tool call while the
// session's skills are active (tools.check, tools.report): the strictest of
// the active skills' decisions, each audited.
func (s *Service) decideHostTool(ctx context.Context, caller api.Peer, method string, ses *store.Session, tool string, input json.RawMessage) (policy.Decision, error) {
	if len(ses.Active) == 0 {
		return policy.Decision{Effect: policy.EffectAllow, Rule: "no skills are active in this session",
			Reason: "tools.check only constrains tools while skills are loaded"}, nil
	}
	// A loaded skill that is gone or changed on disk cannot vouch for
	// anything: fail closed until it is unloaded or loaded again.
	var decs []policy.Decision
	for _, a := range ses.Active {
		sk, err := s.skills.Get(a.Name)
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
		dec, err := s.decide(ctx, sk, tool, input, *base(ctx, caller, method, audit.EventDecision, ses.ID))
		if err != nil {
			return policy.Decision{}, err
		}
		decs = append(decs, dec)
	}
	return policy.Strictest(decs...), nil
}

// ---- confirmations ----

// IsApprover reports whether the config names caller as an approver.
func (s *Service) IsApprover(caller api.Peer) bool {
	name := ""
	if u, err := user.LookupId(strconv.FormatUint(uint64(caller.UID), 10)); err == nil {
		name = u.Username
	}
	return s.cfg.IsApprover(caller.UID, name)
}

func (s *Service) confirmStore() (*store.ConfirmationStore, error) {
	if s.confirms == nil {
		return nil, errkind.Errorf(api.ErrUnavailable, "this skillbox keeps no confirmations (use the daemon)")
	}
	return s.confirms, nil
}

// ListConfirmations implements api.Service: approvers see every request,
// others only their own.
func (s *Service) ListConfirmations(ctx context.Context, caller api.Peer, p api.ListConfirmationsParams) (*api.ListConfirmationsResult, error) {
	cs, err := s.confirmStore()
	if err != nil {
		return nil, err
	}
	all, err := cs.List(store.ConfirmationFilter{SessionID: p.SessionID, State: p.State})
	if err != nil {
		return nil, err
	}
	approver := s.IsApprover(caller)
	out := []*api.Confirmation{}
	for _, c := range all {
		if approver || c.RequestedBy == caller.UID {
			out = append(out, c)
		}
	}
	return &api.ListConfirmationsResult{Confirmations: out}, nil
}

// ApproveConfirmation implements api.Service.
func (s *Service) ApproveConfirmation(ctx context.Context, caller api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	return s.decideConfirmation(ctx, caller, p.ID, true)
}

// DenyConfirmation implements api.Service.
func (s *Service) DenyConfirmation(ctx context.Context, caller api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	return s.decideConfirmation(ctx, caller, p.ID, false)
}

func (s *Service) decideConfirmation(ctx context.Context, caller api.Peer, id string, approve bool) (*api.Confirmation, error) {
	cs, err := s.confirmStore()
	if err != nil {
		return nil, err
	}
	event, method := audit.EventConfirmApprove, api.MethodConfirmationsApprove
	if !approve {
		event, method = audit.EventConfirmDeny, api.MethodConfirmationsDeny
	}
	r := base(ctx, caller, method, event, "")
	r.Confirmation = &audit.ConfirmationInfo{ID: id}
	if !s.IsApprover(caller) {
		r.Outcome, r.Error = "refused", "not an approver"
		err := errkind.Errorf(api.ErrDenied, "uid %d is not an approver: the config's daemon.approvers names who may approve", caller.UID)
		if s.record(ctx, r) == nil {
			err = api.MarkAudited(err)
		}
		return nil, err
	}
	var c *api.Confirmation
	if approve {
		c, err = cs.Approve(id, caller)
	} else {
		c, err = cs.Deny(id, caller)
	}
	if err != nil {
		r.Outcome, r.Error = "refused", err.Error()
		if s.record(ctx, r) == nil {
			err = api.MarkAudited(err)
		}
		return nil, err
	}
	if s.metrics != nil {
		s.metrics.ConfirmationDecided(c)
	}
	r.SessionID = c.SessionID
	r.Confirmation.Digest, r.Confirmation.Rule, r.Confirmation.Reason = c.Digest, c.Rule, c.Reason
	r.Outcome = string(c.State)
	if err := s.record(ctx, r); err != nil {
		return nil, err
	}
	return c, nil
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// decodeFiles turns the wire's input entries into the runtime's and
// checks them (names confined to the working directory, kinds, modes, no
// entry under a file or link) before anything is decided, audited or
// confirmed; an error names the entry as files[i] "name".
func decodeFiles(in []api.File) ([]runtime.InputFile, error) {
	if len(in) > runtime.MaxInputEntries {
		return nil, errkind.Errorf(api.ErrInvalidParams, "files has %d entries, at most %d", len(in), runtime.MaxInputEntries)
	}
	files := make([]runtime.InputFile, 0, len(in))
	for i, f := range in {
		bad := func(format string, args ...any) error {
			return errkind.Errorf(api.ErrInvalidParams, "files[%d] %s: %s", i, runner.ClipText(strconv.Quote(f.Name), 140), fmt.Sprintf(format, args...))
		}
		if err := runtime.ValidateInputName(f.Name); err != nil {
			return nil, errkind.Errorf(api.ErrInvalidParams, "files[%d]: %s", i, errkind.Detail(err, runtime.ErrInvalidJob))
		}
		e := runtime.InputFile{Name: f.Name, Mode: f.Mode}
		switch f.Type {
		case "", api.FileTypeFile:
			if f.Target != "" {
				return nil, bad("a file has no target (use type %q for a link)", api.FileTypeSymlink)
			}
			data, err := base64.StdEncoding.DecodeString(f.Content)
			if err != nil {
				return nil, bad("content is not base64: %v", err)
			}
			e.Data = data
		case api.FileTypeDir:
			if f.Content != "" || f.Target != "" {
				return nil, bad("a directory has no content or target")
			}
			e.Kind = runtime.InputDir
		case api.FileTypeSymlink:
			if f.Content != "" {
				return nil, bad("a symlink has no content")
			}
			e.Kind, e.Target = runtime.InputSymlink, f.Target
		default:
			return nil, bad("unknown type %q: use %q (the default), %q or %q", runner.ClipText(f.Type, 32), api.FileTypeFile, api.FileTypeDir, api.FileTypeSymlink)
		}
		files = append(files, e)
	}
	// The whole set (duplicates, entries under a file or link, modes, link
	// targets); the workdir size is checked against the run's limits later.
	if err := runtime.ValidateInputs(files, math.MaxInt64); err != nil {
		return nil, errkind.Errorf(api.ErrInvalidParams, "files: %s", errkind.Detail(err, runtime.ErrInvalidJob))
	}
	return files, nil
}

// toolInput is what policy sees of a run: its path and args.
func toolInput(path string, args []string) []byte {
	b, _ := json.Marshal(map[string]any{"path": path, "args": args})
	return b
}
