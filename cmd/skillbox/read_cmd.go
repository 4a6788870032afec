package main

import (
	"errors"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/skills"
)

// readCommand prints a file of a skill with the same confinement the daemon's
// skills.read applies, so what a model could read can be checked by hand.
func readCommand() *cli.Command {
	return &cli.Command{
		Name:        "read",
		Usage:       "print a file from a skill, confined to the skill's directory",
		ArgsUsage:   "SKILL PATH",
		Description: "PATH is relative to the skill directory (e.g. references/guide.md). Symlinks leaving the skill, '..', absolute paths, hardlinks and non-regular files are refused with exit code 1.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "root", Usage: "directory holding skills; repeat it, later roots override earlier ones"},
		},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return exitCode(2, "usage: %v (see 'skillbox read --help')", err)
		},
		Action: readAction,
	}
}

func readAction(c *cli.Context) error {
	if c.NArg() != 2 {
		return exitCode(2, "usage: skillbox read --root DIR... SKILL PATH")
	}
	name, rel := c.Args().Get(0), c.Args().Get(1)
	reg, err := skillsOpenRegistry(c, true)
	if err != nil {
		return err
	}
	s, err := reg.Get(name)
	if err != nil {
		return exitCode(1, "%s", skillsOneLine(err.Error()))
	}
	f, err := skills.OpenInRoot(s.Dir, rel)
	if err != nil {
		verb := ""
		if errors.Is(err, skills.ErrEscape) || errors.Is(err, skills.ErrNotRegular) {
			verb = "refused: "
		}
		return exitCode(1, "%s: %s%s", name, verb, skillsOneLine(err.Error()))
	}
	defer f.Close()
	if _, err := io.Copy(c.App.Writer, f); err != nil {
		return exitCode(1, "%s: reading %s: %v", name, rel, err)
	}
	return nil
}
