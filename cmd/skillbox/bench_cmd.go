package main

import "github.com/urfave/cli/v2"

// benchCommand is a placeholder until its implementation lands.
func benchCommand() *cli.Command {
	return &cli.Command{Name: "bench", Usage: "not yet available", Action: func(*cli.Context) error {
		return exitCode(1, "'bench' is not implemented yet")
	}}
}
