package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox"
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/skills"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the daemon: the tool calls over JSON-RPC on a Unix socket",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "HCL config `FILE`", Value: "/etc/skillbox/skillbox.hcl"},
			&cli.StringFlag{Name: "socket", Usage: "override daemon.socket"},
			&cli.DurationFlag{Name: "grace", Usage: "on SIGTERM, how long runs in flight may finish before they are killed", Value: 30 * time.Second},
		},
		Action: serveAction,
	}
}

func init() {
	// Domain errors from the other packages map onto the protocol's kinds.
	sandbox.RegisterErrorKind(skills.ErrNotFound, sandbox.KindNotFound)
	sandbox.RegisterErrorKind(skills.ErrBadName, sandbox.KindInvalidParams)
	sandbox.RegisterErrorKind(skills.ErrEscape, sandbox.KindInvalidParams)
	sandbox.RegisterErrorKind(skills.ErrNotRegular, sandbox.KindInvalidParams)
	sandbox.RegisterErrorKind(skills.ErrTooLarge, sandbox.KindInvalidParams)
	sandbox.RegisterErrorKind(policy.ErrDenied, sandbox.KindDenied)
	sandbox.RegisterErrorKind(runtime.ErrUnavailable, sandbox.KindUnavailable)
	sandbox.RegisterErrorKind(runtime.ErrInvalidJob, sandbox.KindInvalidParams)
	sandbox.RegisterErrorKind(audit.ErrUnavailable, sandbox.KindUnavailable)
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
	d, err := startDaemon(c.Context, cfg, log)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	select {
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String(), "grace", c.Duration("grace"))
	case err := <-d.done:
		if err != nil {
			d.close(context.Background(), "serve failed: "+err.Error())
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Duration("grace"))
	defer cancel()
	d.close(ctx, "signal")
	return nil
}

// resweepAfter is when serve sweeps leftovers a second time: after the
// runtime's grace for run dirs being set up (a few seconds).
const resweepAfter = 5 * time.Second

// runningDaemon holds what serve started, to stop it in order.
type runningDaemon struct {
	cfg    *policy.Config
	log    hclog.Logger
	daemon *sandbox.Daemon
	audit  *audit.Log
	state  *sandbox.StateDB
	cancel context.CancelFunc
	done   chan error
}

// startDaemon opens everything the daemon needs and starts serving. It
// returns once the socket accepts connections.
func startDaemon(parent context.Context, cfg *policy.Config, log hclog.Logger) (*runningDaemon, error) {
	ctx, cancel := context.WithCancel(parent)
	rd := &runningDaemon{cfg: cfg, log: log, cancel: cancel, done: make(chan error, 1)}
	fail := func(err error) (*runningDaemon, error) {
		cancel()
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
	rtVersion, err := eng.Runtime.Version(ctx)
	if err != nil {
		// No silent fallback: a daemon that cannot run scripts says so now.
		return fail(fmt.Errorf("runtime %s: %w", eng.Runtime.Name(), err))
	}
	// Remove the sandboxes, run dirs and cgroups a crashed daemon left. The
	// sweep spares run dirs younger than a moment (they may belong to a run
	// being set up by another process), so a daemon restarted right after a
	// crash sweeps once more shortly after start.
	if err := runtime.Sweep(ctx, eng.Runtime); err != nil {
		log.Warn("sweeping leftovers of an earlier run failed", "error", err)
	}
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(resweepAfter):
		}
		if err := runtime.Sweep(ctx, eng.Runtime); err != nil && ctx.Err() == nil {
			log.Warn("sweeping leftovers of an earlier run failed", "error", err)
		}
	}()
	if rd.state, err = sandbox.OpenStateDB(cfg.Daemon.StateDir); err != nil {
		return fail(err)
	}
	sessions := sandbox.NewSessionStore(rd.state, sandbox.SessionOptions{
		Logger: log,
		OnExpire: func(s sandbox.Session) {
			rd.audit.Append(context.Background(), &audit.Record{Event: audit.EventSessionClose, SessionID: s.ID, Outcome: "expired"})
		},
	})
	confirms := sandbox.NewConfirmationStore(rd.state, sandbox.ConfirmationOptions{DefaultTTL: cfg.Daemon.ConfirmationTTL, Logger: log})
	go sessions.RunSweeper(ctx, time.Minute)
	go confirms.RunSweeper(ctx, time.Minute)

	rd.daemon = sandbox.NewDaemon(sandbox.DaemonOptions{
		Config: cfg, Skills: reg, Engine: eng, Sessions: sessions, Confirmations: confirms, Audit: rd.audit, Logger: log,
	})
	ln, err := sandbox.Listen(cfg.Daemon.Socket, cfg.Daemon.SocketMode, cfg.Daemon.SocketGroup)
	if err != nil {
		return fail(err)
	}
	err = rd.audit.Append(ctx, &audit.Record{
		Event: audit.EventDaemonStart, Peer: selfPeer(),
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

// close stops accepting, lets calls in flight finish until ctx ends, kills the
// rest, and writes the daemon.stop record last.
func (rd *runningDaemon) close(ctx context.Context, why string) {
	if err := rd.daemon.Server().Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		rd.log.Warn("shutdown", "error", err)
	}
	rd.cancel()
	rd.audit.Append(context.Background(), &audit.Record{Event: audit.EventDaemonStop, Peer: selfPeer(), Outcome: why})
	rd.state.Close()
	rd.audit.Close()
	rd.log.Info("stopped")
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
