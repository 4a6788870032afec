package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/skills"
)

// execCommand is skills.run_code at the terminal: code the person wrote,
// run with the skills it names mounted, through the same path as `run`.
func execCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringSliceFlag{Name: "skill", Usage: "`NAME` of a skill to mount read-only at /skills/NAME and put on the module path (repeatable, at least one)"},
		&cli.StringFlag{Name: "language", Usage: "`LANG` of the code: python, shell or node (default: from FILE's extension)"},
		&cli.StringFlag{Name: "code", Aliases: []string{"c"}, Usage: "the `CODE` to run, instead of FILE"},
	}
	// Every flag of `run` but --network: run_code has no network.
	for _, f := range runCommand().Flags {
		if !slices.Contains(f.Names(), "network") {
			flags = append(flags, f)
		}
	}
	return &cli.Command{
		Name:      "exec",
		Usage:     "run code you wrote in a fresh sandbox with skills mounted (skills.run_code)",
		ArgsUsage: "(-c CODE | FILE) [-- ARGS...]",
		Description: "The code runs the way the daemon's skills.run_code runs it: in a fresh sandbox whose\n" +
			"image comes from the language (the config's image for .py, .sh or .js), with every\n" +
			"--skill mounted read-only at /skills/NAME and on the module path (PYTHONPATH,\n" +
			"NODE_PATH), so `from core.gif import make` imports a skill's core/gif.py. The code\n" +
			"itself is read-only at /skills/.code/main.EXT; the working directory is /work, where\n" +
			"--file puts inputs and from where --outputs DIR receives every file the code created\n" +
			"or changed. FILE - reads the code from stdin. Policy decides skills.run_code for\n" +
			"every skill (the strictest wins); the audit keeps the code. Exit codes are run's.",
		Flags: flags,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return exitCode(2, "usage: %v (see 'skillbox exec --help')", err)
		},
		Action: withoutRoot(execAction, nil),
	}
}

// execOptions are the validated arguments of one `skillbox exec`.
type execOptions struct {
	*runOptions
	skills   []string
	language string
	code     []byte
	file     string // the code's file, if any: its extension gives the language
}

func parseExecArgs(c *cli.Context) (*execOptions, error) {
	const usage = "usage: skillbox exec [flags] --skill NAME... (-c CODE | FILE) [-- ARGS...]"
	args := c.Args().Slice()
	var file string
	if !c.IsSet("code") {
		if len(args) == 0 || args[0] == "--" {
			return nil, exitCode(2, "%s: give the code with -c CODE or in FILE", usage)
		}
		file, args = args[0], args[1:]
		if strings.HasPrefix(file, "-") && file != "-" {
			return nil, exitCode(2, "%s: flags go before FILE, the code's arguments after it (or after --)", usage)
		}
	}
	ro, err := parseRunFlags(c, args)
	if err != nil {
		return nil, err
	}
	o := &execOptions{runOptions: ro, skills: c.StringSlice("skill"), language: c.String("language")}
	if len(o.skills) == 0 {
		return nil, exitCode(2, "%s: name the skills the code uses with --skill NAME (see 'skillbox skills list')", usage)
	}
	if o.language != "" && !slices.Contains([]string{api.LanguagePython, api.LanguageShell, api.LanguageNode}, o.language) {
		return nil, exitCode(2, "--language %q: use python, shell or node", o.language)
	}
	switch {
	case c.IsSet("code"):
		o.code = []byte(c.String("code"))
	case file == "-":
		if c.String("stdin") == "-" {
			return nil, exitCode(2, "FILE - and --stdin - both want this terminal's stdin: give one of them a file")
		}
		o.code, err = io.ReadAll(io.LimitReader(os.Stdin, runtime.MaxProgramBytes+1))
	default:
		o.code, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the code: %w", err)
	}
	if len(o.code) > runtime.MaxProgramBytes {
		return nil, exitCode(2, "the code is over %d bytes: put it in a skill and run it with 'skillbox run'", runtime.MaxProgramBytes)
	}
	if o.language == "" && (file == "" || file == "-") {
		return nil, exitCode(2, "%s: give --language python, shell or node (there is no file name to take it from)", usage)
	}
	o.file = file
	return o, nil
}

func execAction(c *cli.Context) error {
	o, err := parseExecArgs(c)
	if err != nil {
		return err
	}
	err = runLocal(c, o.runOptions, "skillbox exec", func(ctx context.Context, cfg *policy.Config, log hclog.Logger) (service.RunRequest, service.SkillIndex, error) {
		lang := o.language
		if lang == "" {
			if lang = runner.LanguageForFile(cfg, o.file); lang == "" {
				return service.RunRequest{}, nil, exitCode(2, "cannot tell the language of %s from its extension: give --language python, shell or node", o.file)
			}
		}
		reg, err := openRegistry(ctx, cfg, c.StringSlice("root"), log)
		if err != nil {
			return service.RunRequest{}, nil, err
		}
		var sks []*skills.Skill
		for _, name := range o.skills {
			sk, err := reg.Get(name)
			if err != nil {
				return service.RunRequest{}, nil, skillNotFound(err, reg.Roots())
			}
			sks = append(sks, sk)
		}
		return service.RunRequest{Code: &service.CodeRequest{Language: lang, Code: o.code, Skills: sks}}, reg, nil
	})
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return cliError(err)
	}
	return nil
}
