package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/runtime/supervisor"
)

// superviseCommand is pid 1 of a session sandbox: this binary, mounted
// read-only into the sandbox, serving the host on its stdin and stdout
// (package supervisor). With --listen it is a pod's agent instead, serving
// the daemon over mutual TLS. Hidden: nobody runs it by hand.
func superviseCommand() *cli.Command {
	return &cli.Command{
		Name:   "supervise",
		Usage:  "be pid 1 of a session sandbox, or a pod's agent (started by skillbox inside the sandbox)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "python-workers", Value: 1, Usage: "pre-started python interpreters waiting for a job (0: none)"},
			&cli.StringFlag{Name: "python", Value: "python3", Usage: "the workers' interpreter `PATH` (a name is looked up in the default PATH)"},
			&cli.StringFlag{Name: "listen", Usage: "serve TLS connections on `ADDR` (host:port) instead of stdin and stdout; needs --tls-cert, --tls-key and --client-ca"},
			&cli.StringFlag{Name: "tls-cert", Usage: "the agent's certificate `FILE` (PEM) for --listen"},
			&cli.StringFlag{Name: "tls-key", Usage: "the agent's private key `FILE` (PEM) for --listen"},
			&cli.StringFlag{Name: "client-ca", Usage: "the CA `FILE` (PEM) a client's certificate must be issued by, for --listen"},
			&cli.DurationFlag{Name: "idle-timeout", Usage: "with --listen, shut down after this long with no client in control (0: never)"},
		},
		Action: func(c *cli.Context) error {
			opts := supervisor.Options{
				PythonWorkers: c.Int("python-workers"),
				Python:        c.String("python"),
				Logf:          func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
			}
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
			return supervisor.ServeListener(c.Context, ln, opts, supervisor.ListenOptions{IdleTimeout: c.Duration("idle-timeout")})
		},
	}
}

// agentTLS is the agent's TLS configuration: its certificate, and a client
// certificate issued by the client CA required of every connection. There
// is no listening without it.
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
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("supervise: client CA %s: %w", caFile, errors.New("no PEM certificate in it"))
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}, nil
}
