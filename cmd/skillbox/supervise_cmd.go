package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/runtime/supervisor"
)

// superviseCommand is pid 1 of a session sandbox: this binary, mounted
// read-only into the sandbox, serving the host on its stdin and stdout
// (package supervisor). Hidden: nobody runs it by hand.
func superviseCommand() *cli.Command {
	return &cli.Command{
		Name:   "supervise",
		Usage:  "be pid 1 of a session sandbox (started by skillbox inside the sandbox)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "python-workers", Value: 1, Usage: "pre-started python interpreters waiting for a job (0: none)"},
			&cli.StringFlag{Name: "python", Value: "python3", Usage: "the workers' interpreter `PATH` (a name is looked up in the default PATH)"},
		},
		Action: func(c *cli.Context) error {
			return supervisor.Serve(c.Context, os.Stdin, os.Stdout, supervisor.Options{
				PythonWorkers: c.Int("python-workers"),
				Python:        c.String("python"),
				Logf:          func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
			})
		},
	}
}
