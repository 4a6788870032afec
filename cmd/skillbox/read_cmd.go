package main

import "github.com/urfave/cli/v2"

// readCommand is a placeholder until its implementation lands.
func readCommand() *cli.Command {
	return &cli.Command{Name: "read", Usage: "not yet available", Action: func(*cli.Context) error {
		return exitCode(1, "'read' is not implemented yet")
	}}
}
