package stack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/doors/console"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
	"github.com/skillbox/skillbox/sandbox/frame/metrics"
)

// Serving is a daemon answering on its socket: what `skillbox serve` and the
// bench's daemon figures start, and stop in the same order (stop accepting,
// let calls finish, stop background work, write daemon.stop, close).
type Serving struct {
	stack  *Stack
	log    hclog.Logger
	cancel context.CancelFunc
	done   chan error
	// metrics is the metrics endpoint (nil: daemon.metrics is not set).
	metrics *metrics.Endpoint
	// console serves the console API on its socket beside the main one.
	console     *http.Server
	consoleDone chan error
	// forced is set when the grace period was cut short.
	forced atomic.Bool
}

// StartDaemon builds the daemon's stack for cfg and starts serving on its socket,
// after the daemon.start record (version names the binary). It returns
// once the socket accepts connections.
func StartDaemon(parent context.Context, cfg *policy.Config, version string, log hclog.Logger) (*Serving, error) {
	if err := CheckServeConfig(cfg); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(parent)
	st, err := New(ctx, Options{Mode: Serve, Config: cfg, Logger: log, Version: version})
	if err != nil {
		cancel()
		return nil, err
	}
	sv := &Serving{stack: st, log: log, cancel: cancel, done: make(chan error, 1)}
	fail := func(err error) (*Serving, error) {
		cancel()
		st.Close()
		return nil, err
	}
	// The main socket opens last: a client that sees it accept finds the
	// metrics and console sockets there too. Both follow its mode and group.
	if m := st.Metrics(); m != nil {
		mln, err := metrics.Listen(cfg.Daemon.Metrics, cfg.Daemon.SocketMode, cfg.Daemon.SocketGroup)
		if err != nil {
			return fail(err)
		}
		sv.metrics = m.Serve(limitListener(mln, "metrics socket", cfg.Daemon, st.Daemon(), log.Named("metrics")), log.Named("metrics"))
	}
	cln, err := sockfile.Listen(console.ConsoleSocket(cfg.Daemon.Socket), cfg.Daemon.SocketMode, cfg.Daemon.SocketGroup)
	if err != nil {
		sv.closeMetrics(ctx)
		return fail(fmt.Errorf("console socket: %w", err))
	}
	sv.console, sv.consoleDone = console.Server(st.Daemon().Service(), log.Named("console")), make(chan error, 1)
	cln = limitListener(cln, "console socket", cfg.Daemon, st.Daemon(), log.Named("console"))
	go func() { sv.consoleDone <- sv.console.Serve(cln) }()
	ln, err := sockfile.Listen(cfg.Daemon.Socket, cfg.Daemon.SocketMode, cfg.Daemon.SocketGroup)
	if err != nil {
		sv.closeMetrics(ctx)
		sv.closeConsole(ctx)
		return fail(err)
	}
	rtName := st.Engine().Runtime().Name()
	self := SelfPeer()
	err = st.Journal().Record(ctx, &audit.Record{
		Event: audit.EventDaemonStart, Peer: &self,
		Daemon: &audit.DaemonInfo{
			Version: version, PID: os.Getpid(), ConfigPath: cfg.File, ConfigHash: cfg.Hash(),
			Socket: cfg.Daemon.Socket, Runtimes: map[string]string{rtName: st.RuntimeVersion()},
		},
	})
	if err != nil {
		ln.Close()
		sv.closeMetrics(ctx)
		sv.closeConsole(ctx)
		return fail(err)
	}
	go func() { sv.done <- st.Daemon().Server().Serve(ctx, ln) }()
	log.Info("serving", "socket", cfg.Daemon.Socket, "runtime", rtName, "runtime_version", st.RuntimeVersion(),
		"skills", len(st.Registry().List()), "audit_dir", cfg.Daemon.AuditDir)
	log.Info("serving the console API", "socket", console.ConsoleSocket(cfg.Daemon.Socket), "path", console.Prefix)
	if sv.metrics != nil {
		log.Info("serving metrics", "address", cfg.Daemon.Metrics.String(), "path", metrics.Path)
	}
	if cfg.Daemon.Traces.Enabled() {
		log.Info("sending traces", "endpoint", cfg.Daemon.Traces.String(), "sample", cfg.Daemon.TracesSample)
	}
	return sv, nil
}

// CheckServeConfig refuses a config the daemon cannot serve with: every run
// must be audited, so daemon.audit_dir is required.
func CheckServeConfig(cfg *policy.Config) error {
	if cfg.Daemon.AuditDir == "" {
		return fmt.Errorf("config %s: daemon.audit_dir is required for serve: every run must be audited", cfg.File)
	}
	return nil
}

// Stack is the stack being served.
func (sv *Serving) Stack() *Stack { return sv.stack }

// Done receives the error that ended serving early (the listener failed).
func (sv *Serving) Done() <-chan error { return sv.done }

// Force marks the stop as forced (a second signal cut the grace period
// short); the daemon.stop record says so.
func (sv *Serving) Force() { sv.forced.Store(true) }

// Close stops accepting (the socket file goes at once), lets calls in
// flight finish until ctx ends, cancels the rest, stops the stack's
// background work (the session sweeper's last sweep saves the sessions'
// last-use times) and then writes the daemon.stop record (why the daemon
// stopped), before it closes the state DB and the log.
func (sv *Serving) Close(ctx context.Context, why string) {
	serr := sv.stack.Daemon().Server().Shutdown(ctx)
	switch {
	case serr == nil:
	case errors.Is(serr, context.DeadlineExceeded), errors.Is(serr, context.Canceled):
		sv.log.Warn("calls still in flight were cancelled", "forced", sv.forced.Load())
	default:
		sv.log.Warn("shutdown", "error", serr)
	}
	sv.closeMetrics(ctx)
	sv.closeConsole(ctx)
	sv.cancel()
	sv.stack.Stop()
	self := SelfPeer()
	stop := &audit.Record{Event: audit.EventDaemonStop, Peer: &self, Outcome: why}
	if sv.forced.Load() {
		stop.Outcome = why + " (forced by a second signal)"
	}
	if serr != nil {
		stop.Error = "calls in flight were cancelled: " + serr.Error()
	}
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := sv.stack.Journal().Record(actx, stop); err != nil {
		sv.log.Error("cannot write the daemon.stop record", "error", err)
	}
	acancel()
	sv.stack.Close()
	sv.log.Info("stopped")
}

// closeMetrics stops the metrics endpoint, if it is served.
func (sv *Serving) closeMetrics(ctx context.Context) {
	if sv.metrics == nil {
		return
	}
	if err := sv.metrics.Close(ctx); err != nil {
		sv.log.Warn("closing the metrics endpoint", "error", err)
	}
	sv.metrics = nil
}

// closeConsole stops the console API; its socket file goes with its
// listener.
func (sv *Serving) closeConsole(ctx context.Context) {
	if sv.console == nil {
		return
	}
	if err := sv.console.Shutdown(ctx); err != nil {
		sv.log.Warn("closing the console API", "error", err)
	}
	if err := <-sv.consoleDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
		sv.log.Warn("the console API stopped", "error", err)
	}
	sv.console = nil
}

// SelfPeer is the caller of a local command: this process.
func SelfPeer() api.Peer {
	return api.Peer{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: int32(os.Getpid()), Process: "skillbox"}
}
