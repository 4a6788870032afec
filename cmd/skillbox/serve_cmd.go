package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/sandbox/daemon"
	"github.com/skillbox/skillbox/sandbox/jsonrpc"
	"github.com/skillbox/skillbox/sandbox/service"
	"github.com/skillbox/skillbox/sandbox/store"
	"github.com/skillbox/skillbox/skills"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the daemon: the tool calls over JSON-RPC on a Unix socket",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "HCL config `FILE`", Value: "/etc/skillbox/skillbox.hcl"},
			&cli.StringFlag{Name: "socket", Usage: "override daemon.socket"},
			&cli.DurationFlag{Name: "grace", Usage: "on SIGTERM or SIGINT, how long runs in flight may finish before they are killed; a second signal kills them at once", Value: 30 * time.Second},
		},
		Action: serveAction,
	}
}

func serveAction(c *cli.Context) error {
	log := newLogger("skillbox", hclog.Info, os.Stderr)
	cfg, err := loadConfig(c.String("config"))
	if err != nil {
		return err
	}
	if s := c.String("socket"); s != "" {
		cfg.Daemon.Socket = s
	}
	if cfg.Daemon.AuditDir == "" {
		return fmt.Errorf("config %s: daemon.audit_dir is required for serve: every run must be audited", c.String("config"))
	}
	if err := rootCheck("serve", cfg.Daemon.Runtime, os.Geteuid()); err != nil {
		return err
	}
	d, err := startDaemon(c.Context, cfg, log)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	why := "signal"
	var serveErr error
	select {
	case sig := <-sigs:
		log.Info("shutting down; runs in flight may finish (send the signal again to kill them now)", "signal", sig.String(), "grace", c.Duration("grace"))
	case serveErr = <-d.done:
		why = "serve failed: " + serveErr.Error()
		log.Error("serving stopped; shutting down", "error", serveErr)
	}
	d.stopGracefully(c.Duration("grace"), why, sigs)
	return serveErr
}

// stopGracefully stops the daemon, letting runs in flight finish for up to
// grace; a signal on sigs meanwhile forces the stop: runs are cancelled (and
// their sandboxes killed) at once, and the daemon.stop record says so.
func (rd *runningDaemon) stopGracefully(grace time.Duration, why string, sigs <-chan os.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case sig := <-sigs:
			rd.log.Warn("second signal: stopping now; runs in flight are cancelled", "signal", sig.String())
			rd.forced.Store(true)
			cancel()
		case <-stopped:
		}
	}()
	rd.close(ctx, why)
}

// resweepAfter are the delays after start-up of the sweeps that follow the
// first one.
var resweepAfter = []time.Duration{3 * time.Second, 30 * time.Second}

// snapshotMaxAge is how long a skill version's copy may go unused before
// the daemon's start removes it.
const snapshotMaxAge = 24 * time.Hour

// runningDaemon holds what serve started, to stop it in order.
type runningDaemon struct {
	cfg    *policy.Config
	log    hclog.Logger
	daemon *daemon.Daemon
	audit  *audit.Log
	state  *store.StateDB
	cancel context.CancelFunc
	done   chan error
	// bg counts the goroutines that use the state DB (the session and
	// confirmation sweepers); close waits for them before closing it.
	bg sync.WaitGroup
	// forced is set when a second signal cut the grace period short.
	forced atomic.Bool
}

// startDaemon opens everything the daemon needs and starts serving. It
// returns once the socket accepts connections.
func startDaemon(parent context.Context, cfg *policy.Config, log hclog.Logger) (*runningDaemon, error) {
	ctx, cancel := context.WithCancel(parent)
	rd := &runningDaemon{cfg: cfg, log: log, cancel: cancel, done: make(chan error, 1)}
	fail := func(err error) (*runningDaemon, error) {
		cancel()
		rd.bg.Wait()
		if rd.state != nil {
			rd.state.Close()
		}
		if rd.audit != nil {
			rd.audit.Close()
		}
		return nil, err
	}

	var err error
	if rd.audit, err = openAudit(cfg, log); err != nil {
		return fail(err)
	}
	reg, err := openRegistry(ctx, cfg, nil, log)
	if err != nil {
		return fail(err)
	}
	for _, p := range reg.Problems() {
		log.Warn("skill not indexed", "path", p.Path, "error", p.Err)
	}
	go func() {
		if err := reg.Watch(ctx); err != nil && ctx.Err() == nil {
			log.Error("skill watcher stopped; hot reload is off", "error", err)
		}
	}()
	eng, err := newEngine(cfg, engineOptions{audit: rd.audit, progress: logWriter{log.Named("images")}}, log)
	if err != nil {
		return fail(err)
	}
	if si, ok := eng.Images.(*service.StoreImages); ok {
		// Building an image takes minutes: inside a call only when the
		// config asks for it; otherwise a missing image fails the call at
		// once, and start-up says which are missing.
		si.Build = cfg.Images.BuildOnDemand
		checkImages(cfg, si, log.Named("images"))
	}
	rtVersion, err := eng.Runtime.Version(ctx)
	if err != nil {
		// No silent fallback: a daemon that cannot run scripts says so now.
		return fail(fmt.Errorf("runtime %s: %w", eng.Runtime.Name(), err))
	}
	// Remove the sandboxes, run dirs and cgroups a crashed daemon left. Runs
	// in progress (another process's) hold their run dir's lock and are
	// spared, whatever their age.
	if err := runtime.Sweep(ctx, eng.Runtime); err != nil {
		log.Warn("sweeping leftovers of an earlier run failed", "error", err)
	}
	// The processes of a daemon killed a moment ago may still be exiting
	// (holding a run dir's lock, or a sandbox runsc cannot delete yet):
	// sweep again once they are gone. Live runs are spared as above.
	rd.bg.Add(1)
	go func() {
		defer rd.bg.Done()
		for _, after := range resweepAfter {
			select {
			case <-ctx.Done():
				return
			case <-time.After(after):
			}
			if err := runtime.Sweep(ctx, eng.Runtime); err != nil && ctx.Err() == nil {
				log.Warn("sweeping leftovers of an earlier run failed", "error", err)
			}
		}
	}()
	startPool(ctx, cfg, eng, reg, &rd.bg, log)
	if ss, ok := eng.Pins.(*service.SnapshotStore); ok {
		if n, err := ss.Prune(snapshotMaxAge); err != nil {
			log.Warn("pruning old skill snapshots failed", "dir", ss.Dir, "error", err)
		} else if n > 0 {
			log.Info("pruned skill snapshots not used for a day", "count", n)
		}
	}
	if rd.state, err = store.OpenStateDB(cfg.Daemon.StateDir); err != nil {
		return fail(err)
	}
	sessions := store.NewSessionStore(rd.state, store.SessionOptions{Logger: log.Named("store")})
	confirms := store.NewConfirmationStore(rd.state, store.ConfirmationOptions{DefaultTTL: cfg.Daemon.ConfirmationTTL, Logger: log.Named("store")})
	proposals, err := store.NewProposalStore(rd.state)
	if err != nil {
		return fail(err)
	}
	// The daemon audits expiries (it hooks the stores), so it exists before
	// the sweepers start.
	rd.daemon = daemon.New(daemon.Options{
		Config: cfg, Skills: reg, Engine: eng, Sessions: sessions, Confirmations: confirms, Proposals: proposals, Audit: rd.audit, Logger: log,
	})
	rd.bg.Add(2)
	go func() { defer rd.bg.Done(); sessions.RunSweeper(ctx, time.Minute) }()
	go func() { defer rd.bg.Done(); confirms.RunSweeper(ctx, time.Minute) }()
	ln, err := jsonrpc.Listen(cfg.Daemon.Socket, cfg.Daemon.SocketMode, cfg.Daemon.SocketGroup)
	if err != nil {
		return fail(err)
	}
	err = rd.audit.Append(ctx, &audit.Record{
		Event: audit.EventDaemonStart, Peer: ptr(selfPeer()),
		Daemon: &audit.DaemonInfo{
			Version: version, PID: os.Getpid(), ConfigPath: cfg.File, ConfigHash: cfg.Hash(),
			Socket: cfg.Daemon.Socket, Runtimes: map[string]string{eng.Runtime.Name(): rtVersion},
		},
	})
	if err != nil {
		ln.Close()
		return fail(err)
	}
	go func() { rd.done <- rd.daemon.Server().Serve(ctx, ln) }()
	log.Info("serving", "socket", cfg.Daemon.Socket, "runtime", eng.Runtime.Name(), "runtime_version", rtVersion,
		"skills", len(reg.List()), "audit_dir", cfg.Daemon.AuditDir)
	return rd, nil
}

// startPool gives the engine the config's warm pool (unless per_key is 0
// or the runtime has no lifecycle) and drains the sandboxes of skills whose
// digest a registry reload changed.
func startPool(ctx context.Context, cfg *policy.Config, eng *service.Engine, reg *skills.Registry, bg *sync.WaitGroup, log hclog.Logger) {
	lc, ok := eng.Runtime.(runtime.Lifecycle)
	if !ok || cfg.Pool.PerKey <= 0 {
		return
	}
	eng.Pool = runtime.NewPool(lc, cfg.Pool.PoolConfig, log)
	bg.Add(1)
	go func() {
		defer bg.Done()
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

// poolReloadCheck is how often the pool looks for a reloaded registry.
const poolReloadCheck = 500 * time.Millisecond

// sweeperStopWait bounds how long close waits for the sweepers' last sweep.
const sweeperStopWait = 30 * time.Second

// close stops accepting (the socket file goes at once), lets calls in flight
// finish until ctx ends, cancels the rest, waits for the sweepers (the
// session sweeper's last sweep saves the sessions' last-use times) and then
// writes the daemon.stop record, before it closes the state DB and the log.
func (rd *runningDaemon) close(ctx context.Context, why string) {
	serr := rd.daemon.Server().Shutdown(ctx)
	switch {
	case serr == nil:
	case errors.Is(serr, context.DeadlineExceeded), errors.Is(serr, context.Canceled):
		rd.log.Warn("calls still in flight were cancelled", "forced", rd.forced.Load())
	default:
		rd.log.Warn("shutdown", "error", serr)
	}
	rd.cancel()
	if p := rd.daemon.Service().Engine().Pool; p != nil {
		// The pool's idle sandboxes go now; a kill -9 leaves them to the
		// next start's Sweep.
		pctx, pcancel := context.WithTimeout(context.Background(), sweeperStopWait)
		if err := p.Close(pctx); err != nil {
			rd.log.Warn("closing the warm pool", "error", err)
		}
		pcancel()
	}
	waited := make(chan struct{})
	go func() { rd.bg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(sweeperStopWait):
		rd.log.Error("the sweepers did not stop; closing the state database anyway", "waited", sweeperStopWait)
	}
	rd.daemon.Service().FlushAudit()
	rd.daemon.FlushRefused()
	stop := &audit.Record{Event: audit.EventDaemonStop, Peer: ptr(selfPeer()), Outcome: why}
	if rd.forced.Load() {
		stop.Outcome = why + " (forced by a second signal)"
	}
	if serr != nil {
		stop.Error = "calls in flight were cancelled: " + serr.Error()
	}
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := rd.audit.Append(actx, stop); err != nil {
		rd.log.Error("cannot write the daemon.stop record", "error", err)
	}
	acancel()
	if err := rd.state.Close(); err != nil {
		rd.log.Warn("closing the state database", "error", err)
	}
	rd.audit.Close()
	rd.log.Info("stopped")
}

// checkImages warns at start-up about every configured image that is not
// built, naming the command that builds it.
func checkImages(cfg *policy.Config, si *service.StoreImages, log hclog.Logger) {
	for _, im := range cfg.Images.List {
		err := si.Built(im.Name)
		switch {
		case err == nil:
		case im.Ref != "":
			log.Warn("registry image cannot run on this runtime; scripts that need it are refused", "image", im.Name, "ref", im.Ref, "error", err)
		case errors.Is(err, images.ErrNotBuilt):
			what := "scripts that need it are refused (unavailable) until it is built"
			if si.Build {
				what = "the first script that needs it builds it (images.build_on_demand), which takes minutes"
			}
			log.Warn("image is not built; "+what, "image", im.Name, "extensions", strings.Join(im.Extensions, " "),
				"dir", si.Store.Dir(), "fix", service.BuildCommand(si.Store.Dir(), im.Recipe))
		case errors.Is(err, images.ErrUnknownImage):
			log.Warn("image has no recipe; scripts that need it cannot run", "image", im.Name, "error", err)
		default:
			log.Warn("cannot tell whether the image is built", "image", im.Name, "error", err)
		}
	}
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
