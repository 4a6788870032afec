package main

import "github.com/urfave/cli/v2"

// runCommand is a placeholder until its implementation lands.
func runCommand() *cli.Command {
	return &cli.Command{Name: "run", Usage: "not yet available", Action: func(*cli.Context) error {
		return exitCode(1, "'run' is not implemented yet")
	}}
}
