package stack

import (
	"context"
	"path/filepath"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/doors/daemon"
)

// buildServe is the daemon's stack: its audit log first (it refuses to
// start without one), the config's skill roots watched, the runtime
// checked and swept and the warm pool made before the engine, old skill
// snapshots pruned, the state in the daemon's store, paused session
// sandboxes recovered, and the daemon with its sweepers.
func (s *Stack) buildServe(ctx context.Context, o Options) error {
	cfg := s.cfg
	if err := s.openAudit(); err != nil {
		return err
	}
	// The daemon serves the config's roots, whatever --root says.
	if err := s.openRegistry(ctx, nil); err != nil {
		return err
	}
	s.watchRegistry(ctx)
	s.openJournal(o.RunLogger)
	s.openMetrics()
	if err := s.openTracing(o.Version); err != nil {
		return err
	}
	eo := servedEngine(o, s.log)
	eo.journal = s.journal
	eo.prepare = func(rt runtime.Runtime) (*runtime.Pool, error) { return s.startRuntime(ctx, rt) }
	eo.checkpoints = filepath.Join(cfg.Daemon.StateDir, "checkpoints")
	if s.metrics != nil {
		eo.onImageBuild = s.metrics.ImageBuilt
	}
	if err := s.openEngine(ctx, eo); err != nil {
		return err
	}
	s.pruneSnapshots(eo.pins)

	// The daemon's callers name only directories of their own that policy
	// grants.
	so := s.serviceOptions(s.registry, o.RunLogger, service.HostWorkspacesGranted)
	var err error
	if s.state, err = openState(cfg, true, cfg.Daemon.StateDir, s.log); err != nil {
		return err
	}
	sessions, confirms, err := s.openStores(&so, cfg.Daemon.StateDir, true)
	if err != nil {
		return err
	}
	// Sandboxes a daemon before this one paused (at its shutdown, or idle)
	// resume on their session's next run.
	if err := s.engine.Sessions().Recover(sessions.Exists); err != nil {
		s.log.Warn("paused session sandboxes not recovered", "error", err)
	}
	// The service audits expiries (it hooks the stores), so it exists
	// before the sweepers start.
	s.daemon = daemon.New(daemon.Options{Options: so, Tracer: s.Tracer()})
	s.svc = s.daemon.Service()
	// Workspaces of sessions that expired while no daemon ran.
	if err := s.svc.SweepSessionWorkspaces(); err != nil {
		s.log.Warn("sweeping the workspaces of ended sessions failed", "error", err)
	}
	s.startSweepers(ctx, sessions, confirms)
	s.warmAuditIndex(ctx)
	return nil
}

// buildMCP is the self-contained MCP server's stack: the daemon's service
// over the watched skill roots, with sessions and proposals in a private
// temp state dir (the config's belongs to the daemon).
func (s *Stack) buildMCP(ctx context.Context, o Options) error {
	if err := s.openRegistry(ctx, o.Roots); err != nil {
		return err
	}
	s.watchRegistry(ctx)
	if err := s.openAudit(); err != nil {
		return err
	}
	s.openJournal(o.RunLogger)
	if err := s.openTracing(o.Version); err != nil {
		return err
	}
	eo := servedEngine(o, s.log)
	eo.journal = s.journal
	if err := s.openEngine(ctx, eo); err != nil {
		return err
	}
	s.sweepRootless(ctx)
	so := s.serviceOptions(s.registry, o.RunLogger, service.HostWorkspacesOwn)
	dir, err := s.openTempState("skillbox-mcp-")
	if err != nil {
		return err
	}
	sessions, confirms, err := s.openStores(&so, dir, true)
	if err != nil {
		return err
	}
	s.svc = service.New(so)
	s.startSweepers(ctx, sessions, confirms)
	s.warmAuditIndex(ctx)
	return nil
}

// buildOneShot is one run's stack: the engine and a service without
// sessions over the index the caller resolved (or the registry of
// o.Roots).
func (s *Stack) buildOneShot(ctx context.Context, o Options) error {
	index := o.Index
	if index == nil {
		if err := s.openRegistry(ctx, o.Roots); err != nil {
			return err
		}
		index = s.registry
	}
	if err := s.openAudit(); err != nil {
		return err
	}
	s.openJournal(o.RunLogger)
	eo := engineOf(o)
	eo.journal = s.journal
	if err := s.openEngine(ctx, eo); err != nil {
		return err
	}
	s.sweepRootless(ctx)
	s.svc = service.New(s.serviceOptions(index, o.RunLogger, service.HostWorkspacesOwn))
	return nil
}

// buildLocal is a one-shot service with sessions and confirmations in a
// temp state dir and, with o.WithEngine, an engine that never builds
// images.
func (s *Stack) buildLocal(ctx context.Context, o Options) error {
	if err := s.openRegistry(ctx, o.Roots); err != nil {
		return err
	}
	if err := s.openAudit(); err != nil {
		return err
	}
	s.openJournal(o.RunLogger)
	if o.WithEngine {
		eo := engineOf(o)
		eo.build, eo.journal = false, s.journal
		if err := s.openEngine(ctx, eo); err != nil {
			return err
		}
		s.sweepRootless(ctx)
	}
	so := s.serviceOptions(s.registry, o.RunLogger, service.HostWorkspacesOwn)
	dir, err := s.openTempState("skillbox-local-")
	if err != nil {
		return err
	}
	if _, _, err := s.openStores(&so, dir, false); err != nil {
		return err
	}
	s.svc = service.New(so)
	return nil
}

// buildEngineOnly is the engine alone: no audit log, no registry, no
// service.
func (s *Stack) buildEngineOnly(ctx context.Context, o Options) error {
	s.openJournal(o.RunLogger)
	if err := s.openEngine(ctx, engineOf(o)); err != nil {
		return err
	}
	s.sweepRootless(ctx)
	return nil
}
