package main

import "github.com/urfave/cli/v2"

// callCommand is a placeholder until its implementation lands.
func callCommand() *cli.Command {
	return &cli.Command{Name: "call", Usage: "not yet available", Action: func(*cli.Context) error {
		return exitCode(1, "'call' is not implemented yet")
	}}
}
