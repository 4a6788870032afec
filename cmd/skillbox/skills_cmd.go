package main

import "github.com/urfave/cli/v2"

// skillsCommand is a placeholder until its implementation lands.
func skillsCommand() *cli.Command {
	return &cli.Command{Name: "skills", Usage: "not yet available", Action: func(*cli.Context) error {
		return exitCode(1, "'skills' is not implemented yet")
	}}
}
