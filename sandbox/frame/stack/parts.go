package stack

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/runtime/rootless"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/frame/metrics"
	"github.com/skillbox/skillbox/sandbox/frame/tracing"
)

// The part openers: each opens one part of a stack from what its mode's
// constructor hands it, and leaves it in s for Close. None of them asks
// which mode it serves.

// openAudit opens the config's audit log (none when it names none).
func (s *Stack) openAudit() (err error) {
	if s.auditLog, err = OpenAudit(s.cfg, s.log); err != nil {
		return &Error{Part: PartAudit, Err: err}
	}
	return nil
}

// openRegistry indexes roots (nil: the config's) once.
func (s *Stack) openRegistry(ctx context.Context, roots []string) (err error) {
	if s.registry, err = OpenRegistry(ctx, s.cfg, roots, s.log); err != nil {
		return &Error{Part: PartSkills, Err: err}
	}
	return nil
}

// watchRegistry warns of the skills that were not indexed and reloads the
// registry as its roots change, until the stack stops.
func (s *Stack) watchRegistry(ctx context.Context) {
	for _, p := range s.registry.Problems() {
		s.log.Warn("skill not indexed", "path", p.Path, "error", p.Err)
	}
	go func() {
		if err := s.registry.Watch(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("skill watcher stopped; hot reload is off", "error", err)
		}
	}()
}

// openJournal makes the one writer of the audit log, for the engine and
// the service (it records nothing without an audit log).
func (s *Stack) openJournal(log hclog.Logger) {
	s.journal = audit.NewJournal(auditor(s.auditLog), log.Named("audit"))
}

// openMetrics makes the metrics when daemon.metrics is set: they hear of
// every audit record, image build and confirmation, and read the pool and
// the sessions when scraped.
func (s *Stack) openMetrics() {
	if !s.cfg.Daemon.Metrics.Enabled() {
		return
	}
	s.metrics = metrics.New(metrics.Options{})
	s.journal.Observe(s.metrics)
}

// openTracing starts sending spans when daemon.traces is set: to the
// collector in batches; Close sends the rest. version names the binary.
func (s *Stack) openTracing(version string) (err error) {
	d := s.cfg.Daemon
	if !d.Traces.Enabled() {
		return nil
	}
	s.tracing, err = tracing.New(tracing.Options{Endpoint: d.Traces, Sample: d.TracesSample, Version: version, Logger: s.log.Named("traces")})
	return err
}

// engineOf are the engine options a mode starts from: the command line's
// overrides, a missing image built inside the run unless o.NoBuild.
func engineOf(o Options) engineOptions {
	return engineOptions{
		pins: &runner.SnapshotStore{Dir: snapshotDir()}, runtime: o.Runtime, containerdAddress: o.ContainerdAddress, imageDir: o.ImageDir,
		build: !o.NoBuild, progress: o.Progress, wrap: o.Images, logger: o.RunLogger.Named("engine"),
	}
}

// servedEngine are the engine options of a server (the daemon, skillbox
// mcp). Building an image takes minutes: inside a call only when the
// config asks for it; otherwise a missing image fails the call at once,
// and start-up says which are missing.
func servedEngine(o Options, log hclog.Logger) engineOptions {
	eo := engineOf(o)
	eo.build, eo.checkImages = o.Config.Images.BuildOnDemand, true
	if eo.progress == nil {
		eo.progress = logWriter{log.Named("images")}
	}
	return eo
}

// openEngine builds the run engine; a warm pool is drained of the skills
// a reload changed, and watched by the metrics.
func (s *Stack) openEngine(ctx context.Context, eo engineOptions) (err error) {
	if s.engine, err = newEngine(s.cfg, eo, s.log); err != nil {
		return err
	}
	if p := s.engine.Pool(); p != nil {
		s.drainOnReload(ctx)
		if s.metrics != nil {
			s.metrics.WatchPool(p.Stats)
		}
	}
	return nil
}

// sweepRootless removes what an ordinary user's killed runs left, when
// this process runs rootless.
func (s *Stack) sweepRootless(ctx context.Context) {
	if rootless.Active() {
		sweepUserRuns(ctx, s.engine.Runtime(), s.log)
	}
}

// pruneSnapshots removes the skill snapshots not used for snapshotMaxAge.
func (s *Stack) pruneSnapshots(pins *runner.SnapshotStore) {
	if n, err := pins.Prune(snapshotMaxAge); err != nil {
		s.log.Warn("pruning old skill snapshots failed", "dir", pins.Dir, "error", err)
	} else if n > 0 {
		s.log.Info("pruned skill snapshots not used for a day", "count", n)
	}
}

// serviceOptions are the service's parts without state: the skills of
// index, the engine and the journal. hostWorkspaces says which host
// directories a caller may name: the daemon's callers only those of their
// own that policy grants, a front end in the user's own process any of
// theirs.
func (s *Stack) serviceOptions(index service.SkillIndex, log hclog.Logger, hostWorkspaces service.HostWorkspacePolicy) service.Options {
	return service.Options{Config: s.cfg, Skills: index, Engine: s.engine, Audit: s.journal, Logger: log, HostWorkspaces: hostWorkspaces}
}

// openTempState opens a state DB in a temp dir of its own, removed on
// Close, and returns the dir.
func (s *Stack) openTempState(prefix string) (dir string, err error) {
	if s.stateDir, err = os.MkdirTemp("", prefix); err != nil {
		return "", err
	}
	if s.state, err = openState(s.cfg, false, s.stateDir, s.log); err != nil {
		return "", err
	}
	return s.stateDir, nil
}

// openStores makes the session and confirmation stores (and, with
// proposals, the proposal store) on the state DB, and gives them to so
// with the session workspaces in dir.
func (s *Stack) openStores(so *service.Options, dir string, proposals bool) (*store.SessionStore, *store.ConfirmationStore, error) {
	cfg := s.cfg.Daemon
	sessions := store.NewSessionStore(s.state, store.SessionOptions{Logger: s.log.Named("store")})
	confirms := store.NewConfirmationStore(s.state, store.ConfirmationOptions{DefaultTTL: cfg.ConfirmationTTL, Logger: s.log.Named("store")})
	so.Sessions, so.Confirmations = sessions, confirms
	if s.metrics != nil {
		s.metrics.WatchSessions(sessions.Count)
		so.Metrics = s.metrics
	}
	so.Locker, _ = s.state.(store.Locker)
	so.SessionWorkspaces, so.WorkspaceQuota = filepath.Join(dir, "workspaces"), cfg.WorkspaceQuota
	so.WorkspaceQuotaPerUID, so.WorkspaceQuotaTotal = cfg.WorkspaceQuotaPerUID, cfg.WorkspaceQuotaTotal
	if proposals {
		var err error
		if so.Proposals, err = store.NewProposalStore(s.state); err != nil {
			return nil, nil, err
		}
	}
	return sessions, confirms, nil
}

// startSweepers expires sessions and confirmations every minute until the
// stack stops.
func (s *Stack) startSweepers(ctx context.Context, sessions *store.SessionStore, confirms *store.ConfirmationStore) {
	s.bg.Add(2)
	go func() { defer s.bg.Done(); sessions.RunSweeper(ctx, time.Minute) }()
	go func() { defer s.bg.Done(); confirms.RunSweeper(ctx, time.Minute) }()
}

// warmAuditIndex indexes the audit log in the background, so the first
// audit search or skill history after start does not pay for it.
func (s *Stack) warmAuditIndex(ctx context.Context) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		start := time.Now()
		if err := s.svc.WarmAuditIndex(ctx); err != nil {
			s.log.Warn("the audit log could not be indexed at start; searches index it on demand", "error", err)
			return
		}
		s.log.Debug("audit log indexed", "took", time.Since(start))
	}()
}
