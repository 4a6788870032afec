// Package stack is where skillbox is wired: from a config it opens the skill
// registry, the audit log, the runtime, the images, the run engine, the
// state stores and the service (and, for serve, the daemon) in the order
// each needs the others, and closes them in the reverse order. Every command
// that runs or authorizes anything builds its parts here, New dispatching to
// one constructor per mode (Serve, MCP, OneShot for run and exec, Local for
// proposals, EngineOnly for deps, check and bench), each composed from part
// openers that never ask the mode, so `skillbox serve`, the self-contained
// MCP server and a one-shot `skillbox run` cannot drift apart in how they
// are put together. Under runtime/rootless it picks the one runtime that
// runs there, runsc rootless, with the user's own directories.
package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/rootless"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/doors/daemon"
	"github.com/skillbox/skillbox/sandbox/frame/metrics"
	"github.com/skillbox/skillbox/sandbox/frame/tracing"
	"github.com/skillbox/skillbox/skills"
)

// Mode is the front end a stack is built for; its constructor (modes.go)
// decides which parts are made and where their state lives.
type Mode int

const (
	// Serve is the daemon: the config's state dir and audit log (required),
	// the skill roots watched, leftovers of an earlier daemon swept, the
	// warm pool, the snapshot store pruned, the session and confirmation
	// sweepers; Stack.Daemon is set.
	Serve Mode = iota + 1
	// MCP is the self-contained MCP server: the daemon's service with the
	// skill roots watched and sessions in a private temp state dir (the
	// config's belongs to the daemon).
	MCP
	// OneShot is one run at the terminal (`skillbox run`, `skillbox
	// exec`): the engine and a service without sessions over the index
	// the caller resolved.
	OneShot
	// Local is a one-shot service with sessions and confirmations in a
	// temp state dir and, when WithEngine is set, an engine that never
	// builds images (`skillbox proposals`).
	Local
	// EngineOnly is the engine alone, with no audit log (`skillbox deps
	// build`, `skillbox skills check`, bench's cold runs).
	EngineOnly
)

// Options say what to build. Config and Mode are required; the rest are
// the command line's overrides of the config.
type Options struct {
	Mode   Mode
	Config *policy.Config
	// Logger is the parent logger; each part names its own.
	Logger hclog.Logger
	// RunLogger, when set, is the engine's and the service's logger
	// instead of Logger (`skillbox run` keeps them quiet: its errors are
	// printed once, as the one-line answer).
	RunLogger hclog.Logger

	// Roots are the skill roots (--root); nil: the config's.
	Roots []string
	// Index, for OneShot, is the skill index the caller resolved (a skill
	// directory given by path has no registry); nil: the registry of Roots.
	Index service.SkillIndex

	// Runtime overrides daemon.runtime; ContainerdAddress overrides
	// runtime "containerd" { address }; ImageDir overrides images.dir (and
	// $SKILLBOX_IMAGES).
	Runtime           string
	ContainerdAddress string
	ImageDir          string
	// NoBuild refuses to build a missing image inside a run (OneShot,
	// EngineOnly; Serve and MCP follow images.build_on_demand, Local never
	// builds).
	NoBuild bool
	// Progress receives image build progress; nil: the log (Serve, MCP)
	// or nothing.
	Progress io.Writer
	// Images, when set, wraps the image store the engine runs from (the
	// CLI's messages about a missing image).
	Images func(*runner.StoreImages) runner.ImageSource
	// WithEngine gives a Local stack an engine (proposals apply runs
	// hooks).
	WithEngine bool
	// Version names the binary (the spans' service.version).
	Version string
}

// Stack is a built skillbox: its parts, and Close, which releases them.
type Stack struct {
	cfg       *policy.Config
	log       hclog.Logger
	registry  *skills.Registry
	auditLog  *audit.Log
	journal   *audit.Journal
	engine    *runner.Engine
	svc       *service.Service
	daemon    *daemon.Daemon
	metrics   *metrics.Metrics // Serve with daemon.metrics set; else nil
	tracing   *tracing.Tracing // Serve and MCP with daemon.traces set; else nil
	state     store.KV
	stateDir  string // a temp state dir of MCP and Local, removed on Close
	rtVersion string

	cancel context.CancelFunc
	// bg counts the goroutines that use the state DB or the pool (the
	// sweepers, the pool's drain on reload); Stop waits for them.
	bg       sync.WaitGroup
	stopOnce sync.Once
}

// Config is the config the stack was built from.
func (s *Stack) Config() *policy.Config { return s.cfg }

// Registry is the skill registry (nil for a OneShot stack given an Index).
func (s *Stack) Registry() *skills.Registry { return s.registry }

// Journal is the audit log's one writer (it records nothing when the
// config names no audit log).
func (s *Stack) Journal() *audit.Journal { return s.journal }

// Engine is the run engine (nil for a Local stack without WithEngine).
func (s *Stack) Engine() *runner.Engine { return s.engine }

// Service is the service (nil for EngineOnly).
func (s *Stack) Service() *service.Service { return s.svc }

// Daemon is the daemon (Serve only).
func (s *Stack) Daemon() *daemon.Daemon { return s.daemon }

// Tracer starts a call's root span (Serve and MCP with daemon.traces
// set; else nil: nothing is traced).
func (s *Stack) Tracer() trace.Tracer {
	if s.tracing == nil {
		return nil
	}
	return s.tracing.Tracer()
}

// Metrics is the daemon's metrics (Serve with daemon.metrics set; else nil).
func (s *Stack) Metrics() *metrics.Metrics { return s.metrics }

// RuntimeVersion is the runtime's version as checked at start (Serve only).
func (s *Stack) RuntimeVersion() string { return s.rtVersion }

// New builds the stack for o.Mode: its constructor opens the parts that
// mode needs, in the order each needs the others. On error everything
// opened so far is closed again.
func New(ctx context.Context, o Options) (*Stack, error) {
	if o.Config == nil {
		return nil, errors.New("stack: no config")
	}
	build, ok := constructors[o.Mode]
	if !ok {
		return nil, fmt.Errorf("stack: unknown mode %d", o.Mode)
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.RunLogger == nil {
		o.RunLogger = o.Logger
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Stack{cfg: o.Config, log: o.Logger, cancel: cancel}
	if err := build(s, ctx, o); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// constructors are the stacks' builders, one a mode (modes.go).
var constructors = map[Mode]func(*Stack, context.Context, Options) error{
	Serve:      (*Stack).buildServe,
	MCP:        (*Stack).buildMCP,
	OneShot:    (*Stack).buildOneShot,
	Local:      (*Stack).buildLocal,
	EngineOnly: (*Stack).buildEngineOnly,
}

// snapshotMaxAge is how long a skill version's copy may go unused before
// the daemon's start removes it.
const snapshotMaxAge = 24 * time.Hour

// resweepAfter are the delays after start-up of the sweeps that follow the
// first one.
var resweepAfter = []time.Duration{3 * time.Second, 30 * time.Second}

// startRuntime is the daemon's start on its runtime: the runtime must
// answer, an earlier daemon's leftovers are swept (now and again shortly),
// and the config's warm pool is made (unless per_key is 0 or the runtime
// has no lifecycle).
func (s *Stack) startRuntime(ctx context.Context, rt runtime.Runtime) (*runtime.Pool, error) {
	v, err := rt.Version(ctx)
	if err != nil {
		// No silent fallback: a daemon that cannot run scripts says so now.
		return nil, fmt.Errorf("runtime %s: %w", rt.Name(), err)
	}
	s.rtVersion = v
	// Remove the sandboxes, run dirs and cgroups a crashed daemon left.
	// Runs in progress (another process's) hold their run dir's lock and
	// are spared, whatever their age.
	if err := runtime.Sweep(ctx, rt); err != nil {
		s.log.Warn("sweeping leftovers of an earlier run failed", "error", err)
	}
	// The processes of a daemon killed a moment ago may still be exiting
	// (holding a run dir's lock, or a sandbox runsc cannot delete yet):
	// sweep again once they are gone. Live runs are spared as above.
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		for _, after := range resweepAfter {
			select {
			case <-ctx.Done():
				return
			case <-time.After(after):
			}
			if err := runtime.Sweep(ctx, rt); err != nil && ctx.Err() == nil {
				s.log.Warn("sweeping leftovers of an earlier run failed", "error", err)
			}
		}
	}()
	lc, ok := rt.(runtime.Lifecycle)
	if !ok && s.cfg.Pool.PerKey > 0 {
		// The kubernetes runtime (for now): no warm sandboxes, and none
		// made on this host instead.
		s.log.Info("no warm pool: the runtime keeps no warm sandboxes, every run starts cold", "runtime", rt.Name())
	}
	if !ok || s.cfg.Pool.PerKey <= 0 {
		return nil, nil
	}
	return runtime.NewPool(lc, s.cfg.Pool.PoolConfig, s.log), nil
}

// poolReloadCheck is how often the pool looks for a reloaded registry.
const poolReloadCheck = 500 * time.Millisecond

// drainOnReload drains the pool's sandboxes of skills whose digest a
// registry reload changed.
func (s *Stack) drainOnReload(ctx context.Context) {
	reg, eng := s.registry, s.engine
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		gen := reg.Generation()
		t := time.NewTicker(poolReloadCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if g := reg.Generation(); g != gen {
				gen = g
				eng.DrainStale(reg.Get)
			}
		}
	}()
}

// stopWait bounds how long Stop waits for the sweepers' last sweep and the
// pool's close.
const stopWait = 30 * time.Second

// Stop ends the stack's background work: the registry watcher and the
// sweepers stop (the session sweeper's last sweep saves the sessions'
// last-use times), the warm pool's idle sandboxes go (a kill -9 leaves them
// to the next start's sweep), and the aggregated audit records still
// pending are written. The parts stay open for a last record; Close closes
// them. Stop may be called more than once.
func (s *Stack) Stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		if s.engine != nil {
			sctx, scancel := context.WithTimeout(context.Background(), stopWait)
			s.engine.Sessions().Close(sctx)
			scancel()
			if p := s.engine.Pool(); p != nil {
				pctx, pcancel := context.WithTimeout(context.Background(), stopWait)
				if err := p.Close(pctx); err != nil {
					s.log.Warn("closing the warm pool", "error", err)
				}
				pcancel()
			}
		}
		waited := make(chan struct{})
		go func() { s.bg.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(stopWait):
			s.log.Error("the sweepers did not stop; closing the state database anyway", "waited", stopWait)
		}
		if s.svc != nil {
			s.svc.FlushAudit()
		}
		if s.daemon != nil {
			s.daemon.FlushRefused()
		}
	})
}

// Close stops the stack (Stop) and closes the state database and the
// audit log.
func (s *Stack) Close() error {
	s.Stop()
	var errs []error
	if s.state != nil {
		if err := s.state.Close(); err != nil {
			s.log.Warn("closing the state database", "error", err)
			errs = append(errs, err)
		}
		s.state = nil
	}
	if s.stateDir != "" {
		os.RemoveAll(s.stateDir)
		s.stateDir = ""
	}
	if s.auditLog != nil {
		if err := s.auditLog.Close(); err != nil {
			errs = append(errs, err)
		}
		s.auditLog = nil
	}
	if s.tracing != nil {
		tctx, tcancel := context.WithTimeout(context.Background(), stopWait)
		if err := s.tracing.Shutdown(tctx); err != nil {
			s.log.Warn("sending the last spans to the collector", "endpoint", s.cfg.Daemon.Traces.String(), "error", err)
		}
		tcancel()
		s.tracing = nil
	}
	return errors.Join(errs...)
}

// Part names what a stack failed to open, for commands that say so in
// their own words.
type Part string

const (
	PartSkills Part = "skills"
	PartAudit  Part = "audit"
)

// Error is New's failure to open a Part; its text is the part's own error.
type Error struct {
	Part Part
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// auditor is l as the journal's Auditor: none when l is nil.
func auditor(l *audit.Log) audit.Auditor {
	if l == nil {
		return nil
	}
	return l
}

// logWriter turns image build progress into log lines.
type logWriter struct{ l hclog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Info(string(trimNewline(p)))
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

// sweepUserRuns removes what an ordinary user's killed runs left (their
// run dirs and runsc's state of their sandboxes; the sandboxes themselves
// died with the command, see runtime/rootless): no daemon of theirs starts
// to sweep, so each rootless command does, when there is something to.
// Runs in progress hold their run dir's lock and are spared.
func sweepUserRuns(ctx context.Context, rt runtime.Runtime, log hclog.Logger) {
	dirs, err := rootless.UserDirs()
	if err != nil {
		return
	}
	if ents, err := os.ReadDir(dirs.Runs()); err != nil || len(ents) == 0 {
		return
	}
	if err := runtime.Sweep(ctx, rt); err != nil {
		log.Warn("sweeping leftovers of an earlier run failed", "error", err)
	}
}
