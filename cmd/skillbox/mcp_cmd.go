package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/mcp"
	"github.com/skillbox/skillbox/sandbox/service"
	"github.com/skillbox/skillbox/sandbox/store"
)

// mcpHosts are the hosts `skillbox mcp config` knows, with where their
// entry goes.
var mcpHosts = map[string]string{
	"claude-code": ".mcp.json in the project (mcpServers), or: claude mcp add-json skillbox '<the skillbox object>'",
	"codex":       "~/.codex/config.toml",
	"cursor":      ".cursor/mcp.json in the project, or ~/.cursor/mcp.json for every project",
}

func mcpServerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "root", Usage: "skill root `DIR` (repeatable; default: the config's skills.roots)"},
		&cli.StringFlag{Name: "config", Usage: "HCL config `FILE` (policy, limits, audit; default: built-in defaults)"},
		&cli.StringFlag{Name: "socket", Usage: "bridge to the daemon listening at `PATH` instead of running scripts in this process"},
	}
}

func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:      "mcp",
		Usage:     "serve skills as a Model Context Protocol server on stdin/stdout (Claude Code, Codex, Cursor, …)",
		UsageText: "skillbox mcp [--root DIR]... [--config FILE] | skillbox mcp --socket PATH\n   skillbox mcp config --host claude-code|codex|cursor [server flags]",
		Description: "Self-contained, skillbox mcp indexes the roots and runs scripts in sandboxes itself, under the config's policy\n" +
			"and audit. With --socket it forwards every call to a running daemon, acting for this process's uid.\n" +
			"One MCP connection is one skillbox session. Logs go to stderr (SKILLBOX_LOG_LEVEL); stdout is the protocol.",
		Flags: append(mcpServerFlags(),
			&cli.StringFlag{Name: "runtime", Usage: "runsc, runc or containerd (overrides daemon.runtime; self-contained only)"},
		),
		Action: mcpAction,
		Subcommands: []*cli.Command{{
			Name:      "config",
			Usage:     "print the entry an MCP host needs to start skillbox mcp",
			UsageText: "skillbox mcp config --host claude-code|codex|cursor [--root DIR]... [--config FILE] [--socket PATH]",
			Flags: append(mcpServerFlags(),
				&cli.StringFlag{Name: "host", Required: true, Usage: "claude-code, codex or cursor"},
			),
			Action: mcpConfigAction,
		}},
	}
}

func mcpAction(c *cli.Context) error {
	if c.Args().Present() {
		return exitCode(2, "usage: skillbox mcp takes no arguments (got %q); did you mean skillbox mcp config?", c.Args().First())
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := newLogger("skillbox", hclog.Warn, os.Stderr)
	opts := mcp.Options{Caller: mcpCaller(), Version: version, Logger: log.Named("mcp")}

	var svc api.Service
	if sock := c.String("socket"); sock != "" {
		if c.IsSet("root") || c.IsSet("config") || c.IsSet("runtime") {
			return exitCode(2, "usage: --socket uses the daemon's roots, config and runtime; drop --root, --config and --runtime, or drop --socket to run self-contained")
		}
		cl, err := client.Dial(ctx, sock)
		if err != nil {
			return fmt.Errorf("connecting to the daemon at %s: %w (is skillbox serve running? or drop --socket to run self-contained)", sock, err)
		}
		defer cl.Close()
		// The client is an api.Service: the same MCP server, over the
		// daemon; the daemon knows this process by its peer credentials.
		svc = cl
		// The daemon decides who may approve; an answer from a user it
		// does not count as an approver is refused and reported.
		opts.ElicitApprovals = true
	} else {
		local, err := openLocalService(ctx, c, log)
		if err != nil {
			return err
		}
		defer local.close()
		svc = local.svc
		opts.ElicitApprovals = local.svc.IsApprover(opts.Caller)
		// Lines the transport refuses (not JSON, a member named twice,
		// over-long) are audited like the socket's refused calls. With
		// --socket the log is the daemon's, which never sees such a line;
		// they are only logged there.
		caller := opts.Caller
		opts.OnRefused = func(r api.Refusal) { local.svc.AuditRefusal(caller, r) }
	}
	err := mcp.New(svc, opts).Serve(ctx, &sdk.StdioTransport{})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// localService is the self-contained service and what it holds open.
type localService struct {
	svc     *service.Service
	closers []func()
}

func (l *localService) close() {
	for i := len(l.closers) - 1; i >= 0; i-- {
		l.closers[i]()
	}
}

// openLocalService builds the service the way serve and run do (registry
// with hot reload, engine, audit log), with sessions and confirmations in
// a state database of its own: a private temp dir, since the config's
// state_dir belongs to the daemon.
func openLocalService(ctx context.Context, c *cli.Context, log hclog.Logger) (_ *localService, err error) {
	l := &localService{}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	cfg, err := loadConfig(c.String("config"))
	if err != nil {
		return nil, err
	}
	reg, err := openRegistry(ctx, cfg, c.StringSlice("root"), log)
	if err != nil {
		return nil, err
	}
	for _, p := range reg.Problems() {
		log.Warn("skill not indexed", "path", p.Path, "error", p.Err)
	}
	watchCtx, cancel := context.WithCancel(ctx)
	l.closers = append(l.closers, cancel)
	go func() {
		if err := reg.Watch(watchCtx); err != nil && watchCtx.Err() == nil {
			log.Error("skill watcher stopped; hot reload is off", "error", err)
		}
	}()
	auditLog, err := openAudit(cfg, log)
	if err != nil {
		return nil, err
	}
	if auditLog != nil {
		l.closers = append(l.closers, func() { auditLog.Close() })
	}
	eng, err := newEngine(cfg, engineOptions{runtime: c.String("runtime"), audit: auditLog, progress: logWriter{log.Named("images")}}, log)
	if err != nil {
		return nil, err
	}
	if si, ok := eng.Images.(*service.StoreImages); ok {
		// As in the daemon: building an image takes minutes, so inside a
		// tool call only when the config asks for it.
		si.Build = cfg.Images.BuildOnDemand
		checkImages(cfg, si, log.Named("images"))
	}
	stateDir, err := os.MkdirTemp("", "skillbox-mcp-")
	if err != nil {
		return nil, err
	}
	l.closers = append(l.closers, func() { os.RemoveAll(stateDir) })
	st, err := store.OpenStateDB(stateDir)
	if err != nil {
		return nil, err
	}
	l.closers = append(l.closers, func() { st.Close() })
	sessions := store.NewSessionStore(st, store.SessionOptions{Logger: log.Named("store")})
	confirms := store.NewConfirmationStore(st, store.ConfirmationOptions{DefaultTTL: cfg.Daemon.ConfirmationTTL, Logger: log.Named("store")})
	proposals, err := store.NewProposalStore(st)
	if err != nil {
		return nil, err
	}
	l.svc = service.New(service.Options{
		Config: cfg, Skills: reg, Engine: eng, Sessions: sessions, Confirmations: confirms, Proposals: proposals, Audit: auditLog, Logger: log,
	})
	// Before the audit log closes: the aggregated records still pending.
	l.closers = append(l.closers, l.svc.FlushAudit)
	sweepCtx, stopSweep := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { sessions.RunSweeper(sweepCtx, time.Minute); done <- struct{}{} }()
	go func() { confirms.RunSweeper(sweepCtx, time.Minute); done <- struct{}{} }()
	// Registered after the state DB, so it runs before the DB closes.
	l.closers = append(l.closers, func() { stopSweep(); <-done; <-done })
	return l, nil
}

// mcpCaller is who a self-contained server acts for: this process's user,
// on behalf of the host that started it (its parent).
func mcpCaller() api.Peer {
	p := api.Peer{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: int32(os.Getppid()), Process: "mcp-host"}
	if comm, err := os.ReadFile("/proc/" + strconv.Itoa(os.Getppid()) + "/comm"); err == nil {
		p.Process = strings.TrimSpace(string(comm))
	}
	return p
}

func mcpConfigAction(c *cli.Context) error {
	host := c.String("host")
	where, ok := mcpHosts[host]
	if !ok {
		return exitCode(2, "usage: unknown --host %q: use claude-code, codex or cursor", host)
	}
	if c.String("socket") != "" && (c.IsSet("root") || c.IsSet("config")) {
		return exitCode(2, "usage: --socket uses the daemon's roots and config; drop --root and --config, or drop --socket")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the skillbox binary: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	args := []string{"mcp"}
	for _, r := range c.StringSlice("root") {
		abs, err := filepath.Abs(r)
		if err != nil {
			return err
		}
		args = append(args, "--root", abs)
	}
	for _, name := range []string{"config", "socket"} {
		if v := c.String(name); v != "" {
			abs, err := filepath.Abs(v)
			if err != nil {
				return err
			}
			args = append(args, "--"+name, abs)
		}
	}
	entry, err := mcpHostEntry(host, exe, args)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.App.ErrWriter, "# for "+host+": add this to "+where)
	_, err = fmt.Fprint(c.App.Writer, entry)
	return err
}

// mcpHostEntry renders the server entry in the form host reads.
func mcpHostEntry(host, exe string, args []string) (string, error) {
	switch host {
	case "codex":
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = tomlString(a)
		}
		return "[mcp_servers.skillbox]\ncommand = " + tomlString(exe) + "\nargs = [" + strings.Join(quoted, ", ") + "]\n", nil
	case "claude-code", "cursor":
		server := map[string]any{"command": exe, "args": args}
		if host == "claude-code" {
			server["type"] = "stdio"
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"mcpServers": map[string]any{"skillbox": server}}); err != nil {
			return "", err
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("unknown host %q", host)
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
