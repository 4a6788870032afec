package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
	"github.com/skillbox/skillbox/skills"
)

// depsCommand is `skillbox deps build SKILL`: a skill's dependency layers
// built (or found) ahead of its first load, the way skills.load does it in
// the background.
func depsCommand() *cli.Command {
	return &cli.Command{
		Name:  "deps",
		Usage: "dependency layers of skills",
		Subcommands: []*cli.Command{{
			Name:      "build",
			Usage:     "build the dependency layers a skill declares (requirements.txt, PEP 723, package.json, config packages)",
			ArgsUsage: "SKILL|SKILLDIR",
			Description: "Artifacts are fetched on the host without running package code (wheels only;\n" +
				"npm with install scripts off) from the config's python_index / npm_registry,\n" +
				"then installed in a sandbox of the image with the network off. A layer is keyed\n" +
				"by (image digest, dependency set) and shared by every skill with the same set.",
			Flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "root", Usage: "skill root `DIR` (repeatable); default: the config's skills.roots"},
				&cli.StringFlag{Name: "config", Usage: "HCL config `FILE` (python_index, npm_registry, packages)"},
				&cli.StringFlag{Name: "runtime", Usage: "`NAME` of the sandbox runtime the install runs in"},
				&cli.StringFlag{Name: "images", Usage: "image store `DIR` (layers are kept beside the images)", EnvVars: []string{"SKILLBOX_IMAGES"}},
				&cli.BoolFlag{Name: "json", Usage: "print the layers as JSON"},
			},
			Action: depsBuild,
		}},
	}
}

func depsBuild(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, "usage: skillbox deps build [--root DIR]... [--config FILE] SKILL|SKILLDIR")
	}
	sk, eng, err := skillEngine(c, stack.Options{Runtime: c.String("runtime"), ImageDir: c.String("images"), Progress: os.Stderr})
	if err != nil {
		return err
	}
	if err := rootCheck("deps build", eng.Runtime().Name(), os.Geteuid()); err != nil {
		return err
	}
	layers, err := eng.Deps().Build(c.Context, sk, sk.Dir)
	if err != nil {
		return cliError(err)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(layers)
	}
	if len(layers) == 0 {
		fmt.Fprintf(c.App.Writer, "skill %q needs no dependency layer (it declares nothing its images lack)\n", sk.Name)
	}
	for _, l := range layers {
		fmt.Fprintf(c.App.Writer, "%s\t%s\t%d artifacts\t%s\n", l.Digest, l.Image, len(l.Artifacts), l.Dir)
	}
	return nil
}

// skillEngine resolves the command's SKILL|SKILLDIR argument (--root,
// --config) and builds the engine the daemon would use for it.
func skillEngine(c *cli.Context, o stack.Options) (*skills.Skill, *runner.Engine, error) {
	log := newLogger("skillbox", hclog.Warn, os.Stderr)
	cfg, err := loadConfig(c.String("config"))
	if err != nil {
		return nil, nil, err
	}
	sk, _, err := resolveSkill(c.Context, cfg, c.StringSlice("root"), c.Args().First(), log)
	if err != nil {
		return nil, nil, cliError(err)
	}
	o.Mode, o.Config, o.Logger = stack.EngineOnly, cfg, log
	st, err := stack.New(c.Context, o)
	if err != nil {
		return nil, nil, cliError(err)
	}
	return sk, st.Engine(), nil
}
