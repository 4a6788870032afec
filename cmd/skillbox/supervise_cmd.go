package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/runtime"
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
			&cli.IntFlag{Name: "job-uid", Usage: "start every run and worker as this `UID` in a user namespace of its own (0: as the supervisor); needs CAP_SETUID and CAP_SETGID"},
			&cli.IntFlag{Name: "job-gid", Usage: "the confined job's `GID` (default: --job-uid)"},
			&cli.BoolFlag{Name: "job-netns", Usage: "give every confined run a loopback-only network namespace of its own (needs --job-uid)"},
			&cli.StringFlag{Name: "job-workdir", Value: runtime.WorkDir, Usage: "the `DIR` made the confined job's at start (\"\": none; needs CAP_CHOWN unless it is the job's)"},
		},
		Action: func(c *cli.Context) error {
			confine, err := jobConfinement(c.Int("job-uid"), c.Int("job-gid"), c.Bool("job-netns"), c.String("job-workdir"), c.IsSet("job-gid"))
			if err != nil {
				return err
			}
			return supervisor.Serve(c.Context, os.Stdin, os.Stdout, supervisor.Options{
				PythonWorkers: c.Int("python-workers"),
				Python:        c.String("python"),
				Confine:       confine,
				Logf:          func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
			})
		},
	}
}

// jobConfinement is the confinement the supervise flags ask for, nil for
// none; a gid or network namespace without a uid is refused rather than
// given less than was asked.
func jobConfinement(uid, gid int, netns bool, workdir string, gidSet bool) (*supervisor.JobConfinement, error) {
	if uid == 0 {
		if gidSet || netns {
			return nil, fmt.Errorf("supervise: --job-gid and --job-netns confine a job that runs as another uid: set --job-uid too")
		}
		return nil, nil
	}
	if !gidSet {
		gid = uid
	}
	c := &supervisor.JobConfinement{UID: uid, GID: gid, NetNS: netns, WorkDir: workdir}
	if err := c.Validate(os.Geteuid(), os.Getegid()); err != nil {
		return nil, fmt.Errorf("supervise: %w", err)
	}
	return c, nil
}
