package main

import "github.com/urfave/cli/v2"

// auditCommand is a placeholder until its implementation lands.
func auditCommand() *cli.Command {
	return &cli.Command{Name: "audit", Usage: "not yet available", Action: func(*cli.Context) error {
		return exitCode(1, "'audit' is not implemented yet")
	}}
}
