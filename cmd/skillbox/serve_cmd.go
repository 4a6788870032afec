package main

import "github.com/urfave/cli/v2"

// serveCommand is a placeholder until its implementation lands.
func serveCommand() *cli.Command {
	return &cli.Command{Name: "serve", Usage: "not yet available", Action: func(*cli.Context) error {
		return exitCode(1, "'serve' is not implemented yet")
	}}
}
