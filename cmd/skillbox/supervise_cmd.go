package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/agentauth"
	"github.com/skillbox/skillbox/runtime/supervisor"
)

// superviseCommand is pid 1 of a session sandbox: this binary, mounted
// read-only into the sandbox, serving the host on its stdin and stdout
// (package supervisor). With --listen it is a pod's agent instead, serving
// daemons of its CA over mutual TLS. Hidden: nobody runs it by hand.
func superviseCommand() *cli.Command {
	return &cli.Command{
		Name:   "supervise",
		Usage:  "be pid 1 of a session sandbox, or a pod's agent (started by skillbox inside the sandbox)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "python-workers", Value: 1, Usage: "pre-started python interpreters waiting for a job (0: none)"},
			&cli.StringFlag{Name: "python", Value: "python3", Usage: "the workers' interpreter `PATH` (a name is looked up in the default PATH)"},
			&cli.IntFlag{Name: "job-uid", Usage: "start every run and worker as this `UID` in a user namespace of its own (0: as the supervisor); needs CAP_SETUID and CAP_SETGID"},
			&cli.IntFlag{Name: "job-gid", Usage: "the confined job's `GID` (default: --job-uid)"},
			&cli.BoolFlag{Name: "job-netns", Usage: "give every confined run a loopback-only network namespace of its own (needs --job-uid)"},
			&cli.StringFlag{Name: "job-workdir", Value: runtime.WorkDir, Usage: "the `DIR` made the confined job's at start (\"\": none; needs CAP_CHOWN unless it is the job's)"},
			&cli.StringFlag{Name: "listen", Usage: "serve mutual TLS connections on `ADDR` (host:port) instead of stdin and stdout; needs --tls-cert, --tls-key and --client-ca"},
			&cli.StringFlag{Name: "tls-cert", Usage: "the agent's certificate `FILE` (PEM) for --listen"},
			&cli.StringFlag{Name: "tls-key", Usage: "the agent's private key `FILE` (PEM) for --listen"},
			&cli.StringFlag{Name: "client-ca", Usage: "the CA `FILE` (PEM) whose daemon certificates may connect, for --listen"},
			&cli.DurationFlag{Name: "idle-timeout", Usage: "with --listen, shut down after this long with no daemon in control (0: never)"},
		},
		Action: func(c *cli.Context) error {
			confine, err := jobConfinement(c.Int("job-uid"), c.Int("job-gid"), c.Bool("job-netns"), c.String("job-workdir"), c.IsSet("job-gid"))
			if err != nil {
				return err
			}
			logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
			opts := supervisor.Options{PythonWorkers: c.Int("python-workers"), Python: c.String("python"), Confine: confine, Logf: logf}
			addr := c.String("listen")
			if addr == "" {
				for _, f := range []string{"tls-cert", "tls-key", "client-ca", "idle-timeout"} {
					if c.IsSet(f) {
						return exitCode(2, "usage: --%s is for --listen", f)
					}
				}
				return supervisor.Serve(c.Context, os.Stdin, os.Stdout, opts)
			}
			cfg, err := agentTLS(c.String("tls-cert"), c.String("tls-key"), c.String("client-ca"))
			if err != nil {
				return err
			}
			ln, err := tls.Listen("tcp", addr, cfg)
			if err != nil {
				return fmt.Errorf("supervise: listen: %w", err)
			}
			return supervisor.ServeListener(c.Context, ln, opts, supervisor.ListenOptions{
				IdleTimeout: c.Duration("idle-timeout"),
				Authorize: func(nc net.Conn) error {
					// The TLS handshake verified the daemon; say which.
					if tc, ok := nc.(*tls.Conn); ok {
						if id, err := agentauth.PeerDaemon(tc.ConnectionState()); err == nil {
							logf("supervise: daemon %s connected from %s", id.Instance, nc.RemoteAddr())
						}
					}
					return nil
				},
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

// agentTLS is the agent's TLS configuration: its certificate, and a
// daemon certificate of the client CA required of every connection
// (agentauth). There is no listening without it.
func agentTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, exitCode(2, "usage: --listen needs --tls-cert, --tls-key and --client-ca: the agent serves mutual TLS only")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("supervise: the agent's certificate %s and key %s: %w", certFile, keyFile, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("supervise: client CA: %w", err)
	}
	pool, err := agentauth.PoolFromPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("supervise: client CA %s: %w", caFile, err)
	}
	return agentauth.AgentServerConfig(cert, pool), nil
}
