package main

import "github.com/urfave/cli/v2"

// policyCommand is a placeholder until its implementation lands.
func policyCommand() *cli.Command {
	return &cli.Command{Name: "policy", Usage: "not yet available", Action: func(*cli.Context) error {
		return exitCode(1, "'policy' is not implemented yet")
	}}
}
