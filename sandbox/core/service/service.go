// Package service is skillbox's transport-free core: sessions of loaded
// skills, the tool calls of sandbox/api as Go methods, and the one
// authorization path every run takes (lock, policy decision with the skill's
// allowed-tools, network and workspace, confirmation, run slot, audit)
// whichever front end asked: the JSON-RPC daemon, the MCP server or
// `skillbox run`. The run engine below it (sandbox/core/runner) turns an
// authorized request into one sandboxed run; the service owns the audit log
// and writes it through the same audit.Journal as the engine. Calls may
// emit events (run output while a script runs) to a sink the front end puts
// in ctx.
//
// Everything else a skill goes through is here too, over helpers of package
// skills, so it takes the same path: activation renders a skill's body, and
// each !`command` in it runs as the policy tool skills.render_command
// (activate.go); PreToolUse and PostToolUse hooks run for tools.check and
// tools.report as runs of their skill that can only narrow a decision
// (hooks.go); proposals change a skill only after an approver's approval
// against its current digest (proposals.go); and the lock pins a skill's
// digest, so a rule with require_lock refuses any other version (lock.go).
// An approval of egress destinations counts once per session, skill and
// destinations.
package service

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
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
	Audit audit.Recorder
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
	// from the audit records (audit.AppendObserver).
	Metrics Metrics
}

// Metrics is what the service tells the daemon's metrics (sandbox/frame/metrics).
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
	journal  audit.Recorder
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
		s.journal = audit.NewJournal(nil, nil)
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
func (s *Service) Journal() audit.Recorder { return s.journal }
