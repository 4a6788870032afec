package main

import "github.com/urfave/cli/v2"

// imagesCommand is a placeholder until its implementation lands.
func imagesCommand() *cli.Command {
	return &cli.Command{Name: "images", Usage: "not yet available", Action: func(*cli.Context) error {
		return exitCode(1, "'images' is not implemented yet")
	}}
}
