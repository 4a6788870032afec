package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/policy/replicaname"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the daemon: the tool calls over JSON-RPC on a Unix socket",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "HCL config `FILE`", Value: "/etc/skillbox/skillbox.hcl"},
			&cli.StringFlag{Name: "socket", Usage: "override daemon.socket"},
			&cli.StringFlag{Name: "replica", Usage: "override daemon.replica: this daemon's `NAME` among replicas (a Kubernetes Deployment sets it from the pod name)", EnvVars: []string{"SKILLBOX_REPLICA"}},
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
	if r := c.String("replica"); r != "" {
		if err := replicaname.Check(r); err != nil {
			return exitCode(2, "--replica (or SKILLBOX_REPLICA): %v", err)
		}
		cfg.Daemon.Replica = r
	}
	if err := stack.CheckServeConfig(cfg); err != nil {
		return err
	}
	if err := rootCheck("serve", cfg.Daemon.Runtime, os.Geteuid()); err != nil {
		return err
	}
	d, err := stack.StartDaemon(c.Context, cfg, version, log)
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
	case serveErr = <-d.Done():
		why = "serve failed: " + serveErr.Error()
		log.Error("serving stopped; shutting down", "error", serveErr)
	}
	stopGracefully(d, c.Duration("grace"), why, sigs, log)
	return serveErr
}

// stopGracefully stops the daemon, letting runs in flight finish for up to
// grace; a signal on sigs meanwhile forces the stop: runs are cancelled (and
// their sandboxes killed) at once, and the daemon.stop record says so.
func stopGracefully(d *stack.Serving, grace time.Duration, why string, sigs <-chan os.Signal, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case sig := <-sigs:
			log.Warn("second signal: stopping now; runs in flight are cancelled", "signal", sig.String())
			d.Force()
			cancel()
		case <-stopped:
		}
	}()
	d.Close(ctx, why)
}
