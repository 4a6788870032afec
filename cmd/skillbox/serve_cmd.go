package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/sandbox/daemon"
	"github.com/skillbox/skillbox/sandbox/jsonrpc"
	"github.com/skillbox/skillbox/sandbox/stack"
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

// runningDaemon holds what serve started, to stop it in order.
type runningDaemon struct {
	cfg    *policy.Config
	log    hclog.Logger
	stack  *stack.Stack
	daemon *daemon.Daemon
	cancel context.CancelFunc
	done   chan error
	// forced is set when a second signal cut the grace period short.
	forced atomic.Bool
}

// startDaemon builds the daemon's stack and starts serving. It returns
// once the socket accepts connections.
func startDaemon(parent context.Context, cfg *policy.Config, log hclog.Logger) (*runningDaemon, error) {
	ctx, cancel := context.WithCancel(parent)
	st, err := stack.New(ctx, stack.Options{Mode: stack.Serve, Config: cfg, Logger: log})
	if err != nil {
		cancel()
		return nil, err
	}
	rd := &runningDaemon{cfg: cfg, log: log, stack: st, daemon: st.Daemon(), cancel: cancel, done: make(chan error, 1)}
	fail := func(err error) (*runningDaemon, error) {
		cancel()
		st.Close()
		return nil, err
	}
	ln, err := jsonrpc.Listen(cfg.Daemon.Socket, cfg.Daemon.SocketMode, cfg.Daemon.SocketGroup)
	if err != nil {
		return fail(err)
	}
	rtName := st.Engine().Runtime().Name()
	err = st.Journal().Record(ctx, &audit.Record{
		Event: audit.EventDaemonStart, Peer: ptr(selfPeer()),
		Daemon: &audit.DaemonInfo{
			Version: version, PID: os.Getpid(), ConfigPath: cfg.File, ConfigHash: cfg.Hash(),
			Socket: cfg.Daemon.Socket, Runtimes: map[string]string{rtName: st.RuntimeVersion()},
		},
	})
	if err != nil {
		ln.Close()
		return fail(err)
	}
	go func() { rd.done <- rd.daemon.Server().Serve(ctx, ln) }()
	log.Info("serving", "socket", cfg.Daemon.Socket, "runtime", rtName, "runtime_version", st.RuntimeVersion(),
		"skills", len(st.Registry().List()), "audit_dir", cfg.Daemon.AuditDir)
	return rd, nil
}

// close stops accepting (the socket file goes at once), lets calls in flight
// finish until ctx ends, cancels the rest, stops the stack's background work
// (the session sweeper's last sweep saves the sessions' last-use times) and
// then writes the daemon.stop record, before it closes the state DB and the
// log.
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
	rd.stack.Stop()
	stop := &audit.Record{Event: audit.EventDaemonStop, Peer: ptr(selfPeer()), Outcome: why}
	if rd.forced.Load() {
		stop.Outcome = why + " (forced by a second signal)"
	}
	if serr != nil {
		stop.Error = "calls in flight were cancelled: " + serr.Error()
	}
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := rd.stack.Journal().Record(actx, stop); err != nil {
		rd.log.Error("cannot write the daemon.stop record", "error", err)
	}
	acancel()
	rd.stack.Close()
	rd.log.Info("stopped")
}
