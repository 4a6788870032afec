package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/doors/console"
)

func consoleCommand() *cli.Command {
	return &cli.Command{
		Name:  "console",
		Usage: "open the security console: a loopback-only bridge to the daemon's console API, acting as your uid",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Usage: "daemon socket `PATH` (the console's socket is beside it)", Value: client.DefaultSocket, EnvVars: []string{client.EnvSocket}},
			&cli.StringFlag{Name: "listen", Usage: "loopback `HOST:PORT` to serve the browser on (port 0: any free one)", Value: "127.0.0.1:0"},
		},
		Action: consoleAction,
	}
}

func consoleAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return exitCode(2, "usage: skillbox console [--socket PATH] [--listen 127.0.0.1:0]")
	}
	log := newLogger("skillbox", hclog.Info, os.Stderr)
	b, err := console.ListenBridge(c.String("listen"), console.ConsoleSocket(c.String("socket")), log)
	if err != nil {
		return exitCode(2, "%v", err)
	}
	fmt.Fprintf(c.App.Writer, "skillbox console: open this URL once (its token works once; the browser then keeps a cookie):\n    %s\n", b.URL())
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, os.Interrupt)
	defer stop()
	return b.ServeUntil(ctx)
}
