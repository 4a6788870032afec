package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
	"github.com/skillbox/skillbox/skills"
)

// skillsCommand groups the tools skill authors and operators use to check
// skills before a daemon ever sees them.
func skillsCommand() *cli.Command {
	usageErr := func(c *cli.Context, err error, _ bool) error {
		return exitCode(2, "usage: %v (see 'skillbox %s --help')", err, c.Command.FullName())
	}
	rootFlag := &cli.StringSliceFlag{Name: "root", Usage: "directory holding skills; repeat it, later roots override earlier ones (global, then user, then project)"}
	return &cli.Command{
		Name:  "skills",
		Usage: "validate, inspect and list Agent Skills",
		Subcommands: append([]*cli.Command{
			{
				Name:         "validate",
				Usage:        "check skills against the Agent Skills specification",
				ArgsUsage:    "PATH...  (a skill directory or its SKILL.md)",
				Description:  "Exits 0 when every skill is valid, 1 when any is not (each problem on stderr as 'PATH: message'), 2 on usage errors.",
				Flags:        []cli.Flag{&cli.BoolFlag{Name: "allow-extensions", Usage: "accept well-known extension fields (Claude Code's disable-model-invocation, tags, requires, ...)"}},
				OnUsageError: usageErr,
				Action:       skillsValidate,
			},
			{
				Name:         "show",
				Usage:        "print a skill's properties",
				ArgsUsage:    "PATH",
				Flags:        []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the frontmatter as JSON, keys as in the file"}},
				OnUsageError: usageErr,
				Action:       skillsShow,
			},
			{
				Name:         "prompt",
				Usage:        "print the <available_skills> block a host would give a model",
				ArgsUsage:    "PATH...",
				Flags:        []cli.Flag{&cli.IntFlag{Name: "budget", Usage: "character budget for the catalog (0 = unlimited)"}},
				OnUsageError: usageErr,
				Action:       skillsPrompt,
			},
			{
				Name:      "check",
				Usage:     "check a skill's scripts against their images and dependency layer: imports and programs, by file and line",
				ArgsUsage: "SKILL|SKILLDIR",
				Description: "A static check (nothing of the skill runs): Python imports and Node requires that will\n" +
					"not resolve, and programs the scripts start (literal names in subprocess, os.system,\n" +
					"child_process; #! lines) that the image lacks, with the skill's declared dependencies\n" +
					"and its built layer taken into account. Exit code 1 when something is missing.",
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: "root", Usage: "skill root `DIR` (repeatable); default: the config's skills.roots"},
					&cli.StringFlag{Name: "config", Usage: "HCL config `FILE` (images, packages)"},
					&cli.StringFlag{Name: "images", Usage: "image store `DIR`", EnvVars: []string{"SKILLBOX_IMAGES"}},
					&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
					&cli.BoolFlag{Name: "all", Usage: "also list what is satisfied"},
				},
				OnUsageError: usageErr,
				Action:       skillsCheck,
			},
			{
				Name:         "list",
				Usage:        "index skill roots and list the skills found",
				Flags:        []cli.Flag{rootFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON"}, &cli.BoolFlag{Name: "allow-extensions", Value: true, Usage: "accept extension fields without warnings"}},
				OnUsageError: usageErr,
				Action:       skillsList,
			},
		}, lifecycleSkillsCommands()...),
	}
}

// skillsLogger logs errors to stderr; SKILLBOX_LOG_LEVEL=debug shows more.
func skillsLogger() hclog.Logger {
	return newLogger("skillbox", hclog.Error, os.Stderr)
}

// skillsDirOf accepts a skill directory or the path of its SKILL.md.
func skillsDirOf(path string) string {
	if filepath.Base(path) == "SKILL.md" {
		return filepath.Dir(path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		return filepath.Dir(path)
	}
	return path
}

// skillsPrintErr writes each problem of err as "PATH: message".
func skillsPrintErr(w io.Writer, path string, err error) {
	var verrs skills.ValidationErrors
	if errors.As(err, &verrs) {
		for _, e := range verrs {
			fmt.Fprintf(w, "%s: %s\n", path, skillsOneLine(e.Error()))
		}
		return
	}
	fmt.Fprintf(w, "%s: %s\n", path, skillsOneLine(err.Error()))
}

func skillsOneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func skillsValidate(c *cli.Context) error {
	paths := c.Args().Slice()
	if len(paths) == 0 {
		return exitCode(2, "usage: skillbox skills validate [--allow-extensions] PATH... (a skill directory or its SKILL.md)")
	}
	opts := skills.LoadOptions{AllowExtensions: c.Bool("allow-extensions")}
	bad := 0
	for _, p := range paths {
		if _, err := skills.LoadDir(skillsDirOf(p), opts); err != nil {
			bad++
			skillsPrintErr(c.App.ErrWriter, p, err)
			continue
		}
		fmt.Fprintf(c.App.Writer, "%s: valid\n", p)
	}
	if bad > 0 {
		return exitCode(1, "%d of %d skills invalid", bad, len(paths))
	}
	return nil
}

// skillsLoadLenient loads a skill for display: extension fields allowed,
// cosmetic problems shown as warnings.
func skillsLoadLenient(c *cli.Context, path string) (*skills.Skill, error) {
	s, err := skills.LoadDir(skillsDirOf(path), skills.LoadOptions{AllowExtensions: true, Lenient: true})
	if err != nil {
		skillsPrintErr(c.App.ErrWriter, path, err)
		return nil, exitCode(1, "%s: cannot load the skill; run 'skillbox skills validate %s' for details", path, path)
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(c.App.ErrWriter, "%s: warning: %s\n", path, skillsOneLine(w))
	}
	return s, nil
}

func skillsShow(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, "usage: skillbox skills show [--json] PATH")
	}
	s, err := skillsLoadLenient(c, c.Args().First())
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s.Properties)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("name", s.Name)
	row("description", skillsOneLine(s.Description))
	row("license", s.License)
	row("compatibility", skillsOneLine(s.Compatibility))
	if s.AllowedTools != nil {
		row("allowed-tools", strings.Join(s.AllowedTools, " "))
		if len(s.AllowedTools) == 0 {
			row("allowed-tools", "(none)")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Metadata)) {
		row("metadata."+k, s.Metadata[k])
	}
	// Extension fields, as written.
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		if slices.Contains(skills.StandardFields, k) {
			continue
		}
		b, _ := json.Marshal(s.Properties[k])
		row(k, string(b))
	}
	if set, err := deps.Discover(s.Dir, deps.Extra{}); err != nil {
		row("dependencies", "invalid: "+err.Error())
	} else if !set.Empty() {
		var py, npm []string
		for _, r := range set.Python {
			py = append(py, r.Line())
		}
		for _, d := range set.Npm {
			npm = append(npm, d.Name+"@"+d.Range)
		}
		row("dependencies.python", strings.Join(py, ", "))
		row("dependencies.npm", strings.Join(npm, ", "))
		row("dependencies.files", strings.Join(set.Files, ", "))
	}
	row("location", s.Location)
	row("digest", s.Digest)
	row("body", fmt.Sprintf("%d lines", strings.Count(s.Body, "\n")))
	return tw.Flush()
}

func skillsPrompt(c *cli.Context) error {
	paths := c.Args().Slice()
	if len(paths) == 0 {
		return exitCode(2, "usage: skillbox skills prompt [--budget N] PATH...")
	}
	var list []*skills.Skill
	for _, p := range paths {
		s, err := skillsLoadLenient(c, p)
		if err != nil {
			return err
		}
		list = append(list, s)
	}
	fmt.Fprint(c.App.Writer, skills.RenderAvailable(list, c.Int("budget")))
	return nil
}

// skillsListEntry is one skill in 'skills list --json', shaped like the
// daemon's skills.list result plus the indexing warnings.
type skillsListEntry struct {
	Name                   string   `json:"name"`
	Description            string   `json:"description"`
	Location               string   `json:"location"`
	Digest                 string   `json:"digest"`
	Tags                   []string `json:"tags,omitempty"`
	DisableModelInvocation bool     `json:"disable-model-invocation,omitempty"`
	Warnings               []string `json:"warnings"`
}

// skillsOpenRegistry indexes the --root directories once, for list and read.
func skillsOpenRegistry(c *cli.Context, allowExt bool) (*skills.Registry, error) {
	roots := c.StringSlice("root")
	if len(roots) == 0 {
		return nil, exitCode(2, "usage: give at least one --root DIR holding skills (see 'skillbox %s --help')", c.Command.FullName())
	}
	for _, r := range roots {
		if fi, err := os.Stat(r); err != nil || !fi.IsDir() {
			return nil, exitCode(1, "skill root %s is not a directory; check the --root path", r)
		}
	}
	reg, err := skills.NewRegistry(skills.RegistryOptions{Roots: roots, AllowExtensions: allowExt, Logger: skillsLogger()})
	if err != nil {
		return nil, exitCode(1, "%v", err)
	}
	if err := reg.Reload(context.Background()); err != nil {
		return nil, exitCode(1, "indexing skills: %v", err)
	}
	return reg, nil
}

func skillsList(c *cli.Context) error {
	if c.NArg() != 0 {
		return exitCode(2, "usage: skillbox skills list --root DIR... [--json] (unexpected argument %q)", c.Args().First())
	}
	reg, err := skillsOpenRegistry(c, c.Bool("allow-extensions"))
	if err != nil {
		return err
	}
	for _, p := range reg.Problems() {
		skillsPrintErr(c.App.ErrWriter, p.Path, p.Err)
	}
	list := reg.List()
	if c.Bool("json") {
		out := make([]skillsListEntry, 0, len(list))
		for _, s := range list {
			out = append(out, skillsListEntry{
				Name: s.Name, Description: s.Description, Location: s.Location, Digest: s.Digest,
				Tags: s.Tags, DisableModelInvocation: s.DisableModelInvocation, Warnings: append([]string{}, s.Warnings...),
			})
		}
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDESCRIPTION\tDIGEST\tLOCATION\tWARNINGS")
	for _, s := range list {
		desc := skillsOneLine(s.Description)
		if r := []rune(desc); len(r) > 60 {
			desc = string(r[:59]) + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", s.Name, desc, skillsShortDigest(s.Digest), s.Location, len(s.Warnings))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range list {
		for _, w := range s.Warnings {
			fmt.Fprintf(c.App.ErrWriter, "%s: warning: %s\n", s.Location, skillsOneLine(w))
		}
	}
	return nil
}

func skillsShortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// skillsCheck is `skillbox skills check`: skills.check at the terminal.
func skillsCheck(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, "usage: skillbox skills check [--root DIR]... [--config FILE] [--json] SKILL|SKILLDIR")
	}
	sk, eng, err := skillEngine(c, stack.Options{ImageDir: c.String("images"), NoBuild: true})
	if err != nil {
		return err
	}
	res, err := eng.CheckSkill(c.Context, sk)
	if err != nil {
		return cliError(err)
	}
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, f := range res.Findings {
			if f.State != "missing" && !c.Bool("all") {
				continue
			}
			by := f.By
			if f.State == "missing" {
				by = f.Hint
			}
			fmt.Fprintf(tw, "%s:%d\t%s\t%s\t%s\t%s\n", f.File, f.Line, f.Kind, f.Name, f.State, by)
		}
		tw.Flush()
		for _, s := range res.Skipped {
			fmt.Fprintf(c.App.ErrWriter, "skillbox: not checked: %s\n", s)
		}
		fmt.Fprintf(w, "%s: %d missing of %d imports and programs\n", sk.Name, res.Missing, len(res.Findings))
	}
	if res.Missing > 0 {
		return &exitError{code: 1}
	}
	return nil
}
