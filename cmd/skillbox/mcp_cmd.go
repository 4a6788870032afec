package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/doors/mcp"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
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
		&cli.StringFlag{Name: "workspace", Usage: "`DIR` runs work on when the client lists no file:// root (default: the directory skillbox mcp starts in, where hosts start it: the project); \"none\" for none"},
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
			&cli.StringFlag{Name: "runtime", Usage: "runsc, runc, containerd or kubernetes (overrides daemon.runtime; self-contained only)"},
		),
		Action: withoutRoot(mcpAction, func(c *cli.Context) bool { return c.String("socket") != "" }),
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
	switch ws := c.String("workspace"); ws {
	case "none":
	case "":
		if wd, err := os.Getwd(); err == nil {
			opts.Workspace = wd
		}
	default:
		abs, err := filepath.Abs(ws)
		if err != nil {
			return exitCode(2, "--workspace %s: %v", ws, err)
		}
		opts.Workspace = abs
	}

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
		// The daemon's service, self-contained: the registry with hot
		// reload, the engine, the audit log, and sessions in a state
		// database of its own (the config's state_dir is the daemon's).
		cfg, err := loadConfig(c.String("config"))
		if err != nil {
			return err
		}
		st, err := stack.New(ctx, stack.Options{Mode: stack.MCP, Config: cfg, Logger: log, Roots: c.StringSlice("root"), Runtime: c.String("runtime"), Version: version})
		if err != nil {
			return err
		}
		defer st.Close()
		local := st.Service()
		svc = local
		opts.ElicitApprovals = local.IsApprover(opts.Caller)
		opts.Tracer = st.Tracer()
		// Lines the transport refuses (not JSON, a member named twice,
		// over-long) are audited like the socket's refused calls. With
		// --socket the log is the daemon's, which never sees such a line;
		// they are only logged there.
		caller := opts.Caller
		opts.OnRefused = func(r api.Refusal) { local.AuditRefusal(caller, r) }
	}
	err := mcp.New(svc, opts).Serve(ctx, &sdk.StdioTransport{})
	if ctx.Err() != nil {
		return nil
	}
	return err
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
