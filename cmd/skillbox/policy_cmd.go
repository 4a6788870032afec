package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	rtcontainerd "github.com/skillbox/skillbox/runtime/containerd"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
	"github.com/skillbox/skillbox/skills"
	"github.com/urfave/cli/v2"
)

// policyCommand groups the tools for the HCL config. `policy check` is what an
// administrator runs before reloading the daemon: it validates a file (every
// problem, with file:line), shows the effective settings with defaults filled
// in, and answers "what would happen if skill S called tool T".
func policyCommand() *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "check and explain a skillbox.hcl config",
		Subcommands: []*cli.Command{{
			Name:      "check",
			Usage:     "validate a config, print its effective settings, and optionally decide one tool call",
			ArgsUsage: "FILE [--skill NAME [--tool TOOL [--input JSON] [--allowed-tools \"A B\"]]]",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "skill", Usage: "skill name to decide for (also prints its limits and network)"},
				&cli.StringFlag{Name: "tool", Usage: "tool being called, e.g. Bash, Read, skills.run_script, network"},
				&cli.StringFlag{Name: "input", Usage: "the call's input as a JSON object, e.g. '{\"command\": \"git status\"}'"},
				&cli.StringFlag{Name: "allowed-tools", Usage: "the skill's allowed-tools, space or comma separated; host names (Bash, Read, Write) are explained as skillbox maps them (not set: not declared)"},
				&cli.BoolFlag{Name: "json", Usage: "print only the decision, as JSON"},
			},
			Action: policyCheck,
		}},
	}
}

type checkOpts struct {
	skill, tool, input, allowed string
	allowedSet, asJSON          bool
}

// checkArgs reads the flags, also when they follow FILE (urfave/cli stops
// parsing flags at the first argument).
func checkArgs(c *cli.Context) (string, checkOpts, error) {
	o := checkOpts{
		skill: c.String("skill"), tool: c.String("tool"), input: c.String("input"),
		allowed: c.String("allowed-tools"), allowedSet: c.IsSet("allowed-tools"), asJSON: c.Bool("json"),
	}
	if c.NArg() == 0 {
		return "", o, errors.New("missing FILE")
	}
	file := c.Args().First()
	if tail := c.Args().Tail(); len(tail) > 0 {
		fs := flag.NewFlagSet("check", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.StringVar(&o.skill, "skill", o.skill, "")
		fs.StringVar(&o.tool, "tool", o.tool, "")
		fs.StringVar(&o.input, "input", o.input, "")
		fs.StringVar(&o.allowed, "allowed-tools", o.allowed, "")
		fs.BoolVar(&o.asJSON, "json", o.asJSON, "")
		if err := fs.Parse(tail); err != nil {
			return "", o, err
		}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "allowed-tools" {
				o.allowedSet = true
			}
		})
		if fs.NArg() > 0 {
			return "", o, fmt.Errorf("unexpected argument %q: give one FILE", fs.Arg(0))
		}
	}
	if o.tool != "" && o.skill == "" {
		return "", o, errors.New("--tool needs --skill")
	}
	if (o.input != "" || o.allowedSet) && o.tool == "" {
		return "", o, errors.New("--input and --allowed-tools need --tool")
	}
	if o.input != "" {
		var m map[string]any
		if err := json.Unmarshal([]byte(o.input), &m); err != nil {
			return "", o, fmt.Errorf("--input is not a JSON object: %v", err)
		}
	}
	if o.asJSON && o.tool == "" {
		return "", o, errors.New("--json prints a decision; give --skill and --tool")
	}
	return file, o, nil
}

func policyCheck(c *cli.Context) error {
	file, o, err := checkArgs(c)
	if err != nil {
		return exitCode(2, "usage: %v (see 'skillbox policy check --help')", err)
	}
	out, errw := c.App.Writer, c.App.ErrWriter
	cfg, err := policy.Load(file)
	if err != nil {
		var ce *policy.ConfigError
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				fmt.Fprintln(errw, p.String())
			}
			return exitCode(1, "%s: %d problem(s); fix them and run 'skillbox policy check %s' again", file, len(ce.Problems), file)
		}
		return exitCode(1, "%v", err)
	}
	if _, err := cfg.Audit.LoadCheckpointKey(); err != nil {
		fmt.Fprintf(errw, "%s: warning: %v (the daemon will need to read it)\n", cfg.Audit.Pos, err)
	}
	if err := runtimeAvailable(c.Context, cfg); err != nil {
		fmt.Fprintln(errw, err)
		return exitCode(1, "%s: the configured runtime is not available; install what is missing or choose another daemon.runtime", file)
	}
	if err := registryImagesRunnable(cfg); err != nil {
		fmt.Fprintln(errw, err)
		return exitCode(1, "%s: the configured runtime cannot run the registry images; use daemon.runtime \"containerd\" or images skillbox builds", file)
	}

	if o.tool != "" {
		req := policy.Request{Skill: o.skill, Tool: o.tool, Input: json.RawMessage(o.input)}
		if o.allowedSet {
			req.AllowedTools = skills.SplitToolList(o.allowed)
			if req.AllowedTools == nil {
				req.AllowedTools = []string{}
			}
			req.Source = "--allowed-tools"
		}
		d := cfg.Decide(req)
		if o.asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			// The decision's fields, and with --allowed-tools what each
			// entry covers.
			v := struct {
				policy.Decision
				AllowedTools []policy.AllowedEntry `json:"allowed_tools,omitempty"`
			}{Decision: d}
			if req.AllowedTools != nil {
				v.AllowedTools = policy.ExplainAllowedTools(req.AllowedTools)
			}
			return enc.Encode(v)
		}
		fmt.Fprintf(out, "%s: valid (%s)\n", cfg.File, cfg.Hash())
		fmt.Fprintf(out, "\nskill %q calling %q", o.skill, o.tool)
		if o.input != "" {
			fmt.Fprintf(out, " with %s", o.input)
		}
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  decision\t%s\n  rule\t%s\n  reason\t%s\n", d.Effect, d.Rule, d.Reason)
		if d.Fix != "" {
			fmt.Fprintf(tw, "  fix\t%s\n", d.Fix)
		}
		if req.AllowedTools != nil {
			fmt.Fprintf(tw, "  allowed-tools\t%s (tool_mode %s)\n", orNone(strings.Join(req.AllowedTools, " "), "declared empty"), cfg.Daemon.ToolMode)
			printAllowedTools(tw, req.AllowedTools)
		}
		printSkill(tw, cfg, o.skill)
		return tw.Flush()
	}
	printConfig(out, cfg)
	if o.skill != "" {
		fmt.Fprintf(out, "\nskill %q\n", o.skill)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		printSkill(tw, cfg, o.skill)
		return tw.Flush()
	}
	return nil
}

// printAllowedTools explains a skill's allowed-tools entry by entry: which
// host names map to which of skillbox's tools, and which cover nothing.
func printAllowedTools(tw io.Writer, list []string) {
	for _, e := range policy.ExplainAllowedTools(list) {
		covers := "covers none of skillbox's tools"
		if len(e.Covers) > 0 {
			covers = "covers " + strings.Join(e.Covers, ", ")
		}
		fmt.Fprintf(tw, "    %s\t%s: %s; %s\n", e.Entry, e.Kind, covers, e.Note)
	}
}

// printSkill shows what the rules give one skill besides tool decisions:
// its limits, which rules set them, and network access.
func printSkill(tw io.Writer, cfg *policy.Config, skill string) {
	l, from := cfg.LimitsFor(skill)
	fmt.Fprintf(tw, "  limits\t%s\n", fmtLimits(l))
	fmt.Fprintf(tw, "  limits from\t%s\n", strings.Join(from, ", "))
	net, rule := cfg.NetworkFor(skill)
	state := "off"
	if net {
		state = "on"
		if d := cfg.Decide(policy.Request{Skill: skill, Tool: policy.NetworkTool}); d.Effect == policy.EffectConfirm {
			state = "on, after confirmation by " + d.Rule
		}
	}
	if rule == policy.RuleNetworkDefault {
		rule = "no matching rule sets network = true"
		if dests, _ := cfg.EgressFor(skill); len(dests) > 0 {
			state = "only through the egress proxy, to the destinations below"
		}
	}
	fmt.Fprintf(tw, "  network\t%s (%s)\n", state, rule)
	printEgress(tw, cfg, skill, net)
	iso, irule := cfg.IsolationFor(skill)
	fmt.Fprintf(tw, "  isolation\t%s (%s)\n", iso, irule)
	dirs, drule := cfg.ScriptDirsFor(skill)
	switch {
	case dirs == nil:
		fmt.Fprintf(tw, "  script_dirs\tany file of the skill may be run (no matching rule sets script_dirs)\n")
	case len(dirs) == 0:
		fmt.Fprintf(tw, "  script_dirs\tnone: no script may be run, the script_dirs of %s have no directory in common\n", drule)
	default:
		fmt.Fprintf(tw, "  script_dirs\tonly files under %s/ may be run (%s)\n", strings.Join(dirs, "/, "), drule)
	}
}

func printConfig(w io.Writer, cfg *policy.Config) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("%s: valid (%s)", cfg.File, cfg.Hash())

	dc := cfg.Daemon
	p("\ndaemon (%s)", dc.Pos)
	group := dc.SocketGroup
	if group == "" {
		group = "unchanged"
	}
	p("  socket\t%s (mode %04o, group %s)", dc.Socket, uint32(dc.SocketMode), group)
	switch m := dc.Metrics; m.Network {
	case "":
		p("  metrics\toff")
	case "unix":
		p("  metrics\t%s (mode and group of the socket)", m)
	default:
		p("  metrics\t%s (loopback)", m)
	}
	p("  state_dir\t%s", dc.StateDir)
	p("  audit_dir\t%s", orNone(dc.AuditDir, "none: no audit log"))
	p("  replica\t%s", orNone(dc.Replica, "the host name; chain in audit_dir itself"))
	p("  approvers\t%s", orNone(strings.Join(dc.Approvers, " "), "none: confirmations cannot be approved"))
	p("  runtime\t%s", dc.Runtime)
	p("  tool_mode\t%s", dc.ToolMode)
	p("  max_connections\t%d", dc.MaxConnections)
	p("  max_concurrent_runs\t%d", dc.MaxConcurrentRuns)
	p("  max_active_skills\t%d", dc.MaxActiveSkills)
	p("  run_queue_timeout\t%s", fmtDur(dc.RunQueueTimeout))
	p("  idle_timeout\t%s", fmtDur(dc.IdleTimeout))
	p("  max_line_bytes\t%s", policy.FormatSize(int64(dc.MaxLineBytes)))
	p("  confirmation_ttl\t%s", fmtDur(dc.ConfirmationTTL))

	sc := cfg.Skills
	p("\nskills (%s)", sc.Pos)
	p("  roots\t%s", orNone(strings.Join(sc.Roots, " "), "none"))
	p("  allow_extensions\t%v", sc.AllowExtensions)
	p("  catalog_budget\t%d characters", sc.CatalogBudget)
	p("  max_depth\t%d", sc.MaxDepth)
	p("  max_skills\t%d", sc.MaxSkills)
	p("  max_read_bytes\t%s", policy.FormatSize(sc.MaxReadBytes))

	if rc := cfg.Runtimes[dc.Runtime]; rc != nil {
		p("\nruntime %q (%s)", rc.Name, rc.Pos)
		if rc.Name == "containerd" {
			p("  address\t%s", rc.Address)
			p("  namespace\t%s", rc.Namespace)
			p("  handler\t%s", rc.Handler)
			p("  binary\t%s", orNone(rc.Binary, "the handler's own"))
			p("  state_dir\t%s", rc.StateDir)
		} else if rc.Name == "kubernetes" {
			p("  kubeconfig\t%s", orNone(rc.Kubeconfig, "$KUBECONFIG, else the in-cluster service account"))
			p("  namespace\t%s", rc.Namespace)
			p("  state_dir\t%s", rc.StateDir)
		} else {
			p("  binary\t%s", rc.Binary)
			p("  state_dir\t%s", rc.StateDir)
			if rc.Name == "runsc" {
				p("  platform\t%s", orNone(rc.Platform, "runsc's default"))
			}
			p("  flags\t%s", orNone(strings.Join(rc.Flags, " "), "none"))
		}
	}

	p("\nimages (%s)", cfg.Images.Pos)
	p("  dir\t%s", cfg.Images.Dir)
	p("  recipes_dirs\t%s", orNone(strings.Join(cfg.Images.RecipesDirs, " "), "none (built-in recipes)"))
	for _, im := range cfg.Images.List {
		from := "recipe " + im.Recipe
		if im.Ref != "" {
			from = "registry image " + im.Ref
		}
		p("  %s\t%s → %s\t(shebangs: %s; %s; %s)", im.Name, orNone(strings.Join(im.Extensions, " "), "no extensions"),
			strings.Join(im.Interpreter, " "), orNone(strings.Join(im.Shebangs, " "), "none"), from, im.Pos)
	}

	p("\nlimits (%s)", cfg.LimitsPos)
	p("  %s", fmtLimits(cfg.Limits))

	ss := cfg.Sessions
	p("\nsessions (%s)", ss.Pos)
	p("  idle_timeout\t%s", orNone(fmtDur(ss.IdleTimeout), "0: session sandboxes are never checkpointed"))
	p("  checkpoint_budget\t%s", policy.FormatSize(ss.CheckpointBudget))
	p("  checkpoint_budget_per_session\t%s", policy.FormatSize(ss.CheckpointBudgetPerSession))
	p("  checkpoint_budget_per_uid\t%s", policy.FormatSize(ss.CheckpointBudgetPerUID))
	p("  checkpoint_disk_percent\t%s", orNone(pctOrEmpty(ss.CheckpointDiskPercent), "0: no share of the disk kept (audit.min_free still is)"))
	p("  max_sandboxes\t%d", ss.MaxSandboxes)
	p("  background_runs\t%d", ss.BackgroundRuns)

	ac := cfg.Audit
	p("\naudit (%s)", ac.Pos)
	p("  rotate_bytes\t%s", policy.FormatSize(ac.RotateBytes))
	p("  rotate_age\t%s", orNone(fmtDur(ac.RotateAge), "none"))
	if ac.CheckpointKey == "" {
		p("  checkpoints\toff (no checkpoint_key)")
	} else {
		p("  checkpoint_key\t%s", ac.CheckpointKey)
		p("  checkpoint_interval\t%s", fmtDur(ac.CheckpointInterval))
	}

	p("\npolicy rules (all rules matching a skill apply together: deny beats confirm beats allow; limits take the strictest; script_dirs intersect)")
	for _, r := range cfg.Rules {
		p("  %s", r)
		p("    skills\t%s", strings.Join(r.Skills, " "))
		if len(r.Tools) > 0 {
			p("    tools\t%s", strings.Join(r.Tools, " "))
		}
		if len(r.Deny) > 0 {
			p("    deny\t%s", strings.Join(r.Deny, " "))
		}
		if len(r.Confirm) > 0 {
			p("    confirm\t%s", strings.Join(r.Confirm, " "))
		}
		if r.Network != nil {
			p("    network\t%v", *r.Network)
		}
		if r.ScriptDirs != nil {
			p("    script_dirs\t%s", strings.Join(r.ScriptDirs, " "))
		}
		if r.Isolation != "" {
			p("    isolation\t%s", r.Isolation)
		}
		if r.Workspace != "" {
			p("    workspace\t%s", r.Workspace)
		}
		if len(r.WorkspacePaths) > 0 {
			p("    workspace_paths\t%s", strings.Join(r.WorkspacePaths, " "))
		}
		if r.WorkspaceDelete != nil {
			p("    workspace_delete\t%v", *r.WorkspaceDelete)
		}
		if r.WorkspaceExcludes != nil {
			p("    workspace_excludes\t%s", strings.Join(r.WorkspaceExcludes, " "))
		}
		if len(r.Egress) > 0 {
			names := make([]string, len(r.Egress))
			for i, d := range r.Egress {
				names[i] = d.String()
			}
			p("    egress\t%s", strings.Join(names, " "))
		}
		if r.Limits != (runtime.Limits{}) {
			p("    limits\t%s", fmtRuleLimits(r.Limits))
		}
	}
	tw.Flush()
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// fmtDur prints 30m rather than 30m0s.
func fmtDur(d time.Duration) string {
	if d == 0 {
		return ""
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func fmtLimits(l runtime.Limits) string { return fmtLimitFields(l, true) }

// fmtRuleLimits prints only the fields a rule sets.
func fmtRuleLimits(l runtime.Limits) string { return fmtLimitFields(l, false) }

// fmtLimitFields prints l's fields by their HCL names: every field, or only
// the ones set.
func fmtLimitFields(l runtime.Limits, all bool) string {
	var parts []string
	for _, f := range runtime.LimitFields {
		if !all && !f.IsSet(&l) {
			continue
		}
		var v string
		switch p := f.Ptr(&l).(type) {
		case *time.Duration:
			v = fmtDur(*p)
		case *float64:
			v = fmt.Sprintf("%g", *p)
		case *int:
			v = fmt.Sprint(*p)
		case *int64:
			if f.Kind == runtime.LimitSize {
				v = policy.FormatSize(*p)
			} else {
				v = fmt.Sprint(*p)
			}
		}
		parts = append(parts, f.HCL+" "+v)
	}
	return strings.Join(parts, ", ")
}

// runtimeCheckTimeout bounds asking the configured runtime for its version.
const runtimeCheckTimeout = 15 * time.Second

// registryImagesRunnable refuses registry images (image blocks with ref)
// on a daemon runtime other than containerd, the one that pulls them.
func registryImagesRunnable(cfg *policy.Config) error {
	if cfg.Daemon.Runtime == rtcontainerd.Name {
		return nil
	}
	var errs []error
	for _, im := range cfg.Images.List {
		if im.Ref != "" {
			errs = append(errs, fmt.Errorf("%s: image %q is the registry image %s: daemon.runtime %q cannot run it (only %q pulls and runs registry images)",
				im.Pos, im.Name, im.Ref, cfg.Daemon.Runtime, rtcontainerd.Name))
		}
	}
	return errors.Join(errs...)
}

// runtimeAvailable asks the runtime daemon.runtime names for its version:
// a runtime that is not there (a missing binary, an unreachable containerd,
// a missing handler) is an error naming what is missing, at the position of
// its block (or of daemon.runtime).
func runtimeAvailable(ctx context.Context, cfg *policy.Config) error {
	name := cfg.Daemon.Runtime
	pos := cfg.Daemon.Pos
	if rc := cfg.Runtimes[name]; rc != nil && rc.Pos.Line > 0 {
		pos = rc.Pos
	}
	rt, err := stack.OpenRuntime(cfg, stack.RuntimeOptions{})
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, runtimeCheckTimeout)
		defer cancel()
		_, err = rt.Version(ctx)
		if cl, ok := rt.(interface{ Close(context.Context) error }); ok {
			_ = cl.Close(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: runtime %q: %v", pos, name, err)
	}
	return nil
}

func pctOrEmpty(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d%%", n)
}
