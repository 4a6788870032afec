// Command skillbox is the one binary: the daemon (serve), the local runner
// (run, exec), the MCP server, and the tools people use around them (skills,
// policy, audit, images, deps, bench). Its commands parse flags, build their
// parts through sandbox/frame/stack and print results; nothing here decides what
// may run. Commands that start sandboxes run for an ordinary user through
// runtime/rootless (withoutRoot), and SKILLBOX_LOG_LEVEL sets the log level
// of every command.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries a specific exit code (a script's, or 2 for usage) out of
// an action without printing anything more than its message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitCode wraps msg so the command exits with code after printing it.
func exitCode(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// usageError makes a flag or argument mistake one line and exit code 2,
// instead of the whole help text.
func usageError(c *cli.Context, err error, _ bool) error {
	return exitCode(2, "usage: %v (add --help to see the command's flags)", err)
}

// setUsageErrors gives every command without its own handler usageError;
// urfave/cli applies the app's handler to the top level only.
func setUsageErrors(cmds []*cli.Command) {
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = usageError
		}
		setUsageErrors(c.Subcommands)
	}
}

func newApp() *cli.App {
	app := &cli.App{
		Name:    "skillbox",
		Usage:   "run AI-agent skill scripts in isolated sandboxes",
		Version: version,
		Commands: []*cli.Command{
			serveCommand(),
			runCommand(),
			execCommand(),
			callCommand(),
			readCommand(),
			skillsCommand(),
			policyCommand(),
			auditCommand(),
			consoleCommand(),
			imagesCommand(),
			depsCommand(),
			benchCommand(),
			mcpCommand(),
			proposalsCommand(),
			versionCommand(),
			superviseCommand(),
		},
		// Usage errors exit 2 with one line, like the rest of the CLI.
		OnUsageError:   usageError,
		ExitErrHandler: func(*cli.Context, error) {},
	}
	setUsageErrors(app.Commands)
	return app
}

func main() {
	err := newApp().Run(os.Args)
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, "skillbox: "+ee.msg)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "skillbox: "+err.Error())
	os.Exit(1)
}
