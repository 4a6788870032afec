package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
	"github.com/skillbox/skillbox/skills"
)

// The skill lifecycle commands: `skills render` (skills.activate),
// `skills lock` and `skills diff` (pinned versions) and `proposals …`
// (reviewing agents' proposed changes). They call the service, locally or
// through the daemon; policy, confirmation and audit happen there.

func socketFlag() cli.Flag {
	return &cli.StringFlag{Name: "socket", Usage: "daemon socket `PATH` (proposals need the daemon)", Value: client.DefaultSocket, EnvVars: []string{client.EnvSocket}}
}

// lifecycleSkillsCommands are added to `skillbox skills`.
func lifecycleSkillsCommands() []*cli.Command {
	rootFlag := &cli.StringSliceFlag{Name: "root", Usage: "directory holding skills (default: the config's skills.roots); repeat it"}
	configFlag := &cli.StringFlag{Name: "config", Usage: "config `FILE` (policy, lock file, audit dir)"}
	lockFlag := &cli.StringFlag{Name: "lock", Usage: "lock `FILE` (default: the config's skills.lock_file)"}
	return []*cli.Command{
		{
			Name:      "render",
			Usage:     "render a skill's body for one invocation (skills.activate): $ARGUMENTS, $N, ${SKILL_DIR}, !`command` in a sandbox when policy allows",
			ArgsUsage: "NAME [-- ARGS...]",
			Flags: []cli.Flag{rootFlag, configFlag,
				&cli.BoolFlag{Name: "daemon", Usage: "render through the running daemon (its session, policy and audit)"}, socketFlag(),
				&cli.BoolFlag{Name: "user", Usage: "a user invocation (default: a model invocation)"},
				&cli.BoolFlag{Name: "json", Usage: "print the whole result as JSON"}},
			Action: skillsRender,
		},
		{
			Name:        "lock",
			Usage:       "pin skills' current versions (name → digest, approver, time) in the lock file",
			ArgsUsage:   "[NAME...]  (default: every skill found)",
			Description: "Only approvers may lock. With --daemon the running daemon writes the lock and audits it; otherwise this command does, in the config's audit log.",
			Flags:       []cli.Flag{rootFlag, configFlag, lockFlag, &cli.BoolFlag{Name: "daemon", Usage: "lock through the running daemon"}, socketFlag()},
			Action:      skillsLock,
		},
		{
			Name:      "diff",
			Usage:     "show which files of a skill changed since the version the lock pins",
			ArgsUsage: "NAME",
			Flags:     []cli.Flag{rootFlag, configFlag, lockFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON"}},
			Action:    skillsDiff,
		},
	}
}

// proposalsCommand reviews proposed changes to skills (on the daemon).
func proposalsCommand() *cli.Command {
	return &cli.Command{
		Name:  "proposals",
		Usage: "review changes agents proposed to skills (skills.propose)",
		Subcommands: []*cli.Command{
			{Name: "list", Usage: "list proposals", Flags: []cli.Flag{socketFlag(),
				&cli.StringFlag{Name: "skill", Usage: "only this skill"}, &cli.StringFlag{Name: "state", Usage: "pending | applied | exported | rejected"},
				&cli.BoolFlag{Name: "json", Usage: "print JSON"}}, Action: proposalsList},
			{Name: "show", Usage: "show a proposal and its diff", ArgsUsage: "ID", Flags: []cli.Flag{socketFlag(), &cli.BoolFlag{Name: "json", Usage: "print JSON"}}, Action: proposalsShow},
			{Name: "approve", Usage: "apply a proposal to its skill (or export a patch for a read-only root)", ArgsUsage: "ID",
				Flags: []cli.Flag{socketFlag(), &cli.StringFlag{Name: "note", Usage: "a comment for the audit trail"}}, Action: proposalsDecide(true)},
			{Name: "reject", Usage: "reject a proposal", ArgsUsage: "ID",
				Flags: []cli.Flag{socketFlag(), &cli.StringFlag{Name: "note", Usage: "why (for the proposer and the audit trail)"}}, Action: proposalsDecide(false)},
		},
	}
}

func dialDaemon(c *cli.Context) (*client.Client, error) {
	cl, err := client.Dial(c.Context, c.String("socket"))
	if err != nil {
		return nil, exitCode(1, "cannot reach the daemon on %s: %v (start it with 'skillbox serve', or pass --socket)", c.String("socket"), err)
	}
	return cl, nil
}

func printJSON(c *cli.Context, v any) error {
	enc := json.NewEncoder(c.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func proposalsList(c *cli.Context) error {
	cl, err := dialDaemon(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := cl.ListProposals(c.Context, api.Peer{}, api.ListProposalsParams{Skill: c.String("skill"), State: c.String("state")})
	if err != nil {
		return exitCode(1, "proposals.list: %v", err)
	}
	if c.Bool("json") {
		return printJSON(c, res)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSKILL\tSTATE\tFILES\tCREATED\tJUSTIFICATION")
	for _, p := range res.Proposals {
		j := skillsOneLine(p.Justification)
		if r := []rune(j); len(r) > 60 {
			j = string(r[:59]) + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Skill, p.State, strings.Join(p.Files, ","), p.Created.Format("2006-01-02 15:04"), j)
	}
	return tw.Flush()
}

func proposalsShow(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, "usage: skillbox proposals show ID")
	}
	cl, err := dialDaemon(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	p, err := cl.ShowProposal(c.Context, api.Peer{}, api.ProposalIDParams{ID: c.Args().First()})
	if err != nil {
		return exitCode(1, "proposals.show: %v", err)
	}
	if c.Bool("json") {
		return printJSON(c, p)
	}
	printProposal(c, p)
	return nil
}

func printProposal(c *cli.Context, p *api.Proposal) {
	w := c.App.Writer
	fmt.Fprintf(w, "proposal %s: skill %q, %s\n", p.ID, p.Skill, p.State)
	fmt.Fprintf(w, "against:  %s\n", p.BaseDigest)
	fmt.Fprintf(w, "by:       %s, %s (session %s)\n", p.ProposedBy, p.Created.Format("2006-01-02 15:04:05Z07:00"), p.SessionID)
	if p.DecidedBy != nil {
		fmt.Fprintf(w, "decided:  %s by %s\n", p.DecidedAt.Format("2006-01-02 15:04:05Z07:00"), p.DecidedBy)
	}
	if p.NewDigest != "" {
		fmt.Fprintf(w, "now:      %s\n", p.NewDigest)
	}
	if p.PatchFile != "" {
		fmt.Fprintf(w, "patch:    %s\n", p.PatchFile)
	}
	fmt.Fprintf(w, "files:    %s\n\nJustification:\n%s\n", strings.Join(p.Files, " "), p.Justification)
	if p.Evidence != "" {
		fmt.Fprintf(w, "\nEvidence:\n%s\n", p.Evidence)
	}
	if p.Diff != "" {
		fmt.Fprintf(w, "\n%s", p.Diff)
		if !strings.HasSuffix(p.Diff, "\n") {
			fmt.Fprintln(w)
		}
	}
}

func proposalsDecide(approve bool) cli.ActionFunc {
	return func(c *cli.Context) error {
		verb := map[bool]string{true: "approve", false: "reject"}[approve]
		if c.NArg() != 1 {
			return exitCode(2, "usage: skillbox proposals %s [--note TEXT] ID", verb)
		}
		cl, err := dialDaemon(c)
		if err != nil {
			return err
		}
		defer cl.Close()
		params := api.ProposalIDParams{ID: c.Args().First(), Note: c.String("note")}
		var p *api.Proposal
		if approve {
			p, err = cl.ApproveProposal(c.Context, api.Peer{}, params)
		} else {
			p, err = cl.RejectProposal(c.Context, api.Peer{}, params)
		}
		if err != nil {
			return exitCode(1, "proposals.%s: %v", verb, err)
		}
		printProposal(c, p)
		return nil
	}
}

// oneShotService is a service over the config's (or --root) skills with a
// temporary state directory, for a one-shot local command. close releases it.
func oneShotService(c *cli.Context, needEngine bool) (*service.Service, *policy.Config, func(), error) {
	ctx := c.Context
	cfg, err := loadConfig(c.String("config"))
	if err != nil {
		return nil, nil, nil, exitCode(1, "%v", err)
	}
	if c.IsSet("lock") {
		cfg.Skills.LockFile = c.String("lock")
	}
	log := newLogger("skillbox", hclog.Warn, os.Stderr)
	st, err := stack.New(ctx, stack.Options{Mode: stack.Local, Config: cfg, Logger: log, Roots: c.StringSlice("root"), Progress: os.Stderr, WithEngine: needEngine})
	var se *stack.Error
	switch {
	case err == nil:
	case errors.As(err, &se) && se.Part == stack.PartSkills:
		return nil, nil, nil, exitCode(1, "indexing skills: %v", err)
	case errors.As(err, &se) && se.Part == stack.PartAudit:
		return nil, nil, nil, exitCode(1, "%v (when the daemon holds the audit log, use --daemon)", err)
	default:
		return nil, nil, nil, exitCode(1, "%v", err)
	}
	svc := st.Service()
	done := func() { st.Close() }
	return svc, cfg, done, nil
}

func skillsRender(c *cli.Context) error {
	if c.NArg() < 1 {
		return exitCode(2, "usage: skillbox skills render [--root DIR]... [--config FILE] [--user] NAME [-- ARGS...]")
	}
	name := c.Args().First()
	args := c.Args().Slice()[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	p := api.ActivateParams{Name: name, Arguments: strings.Join(args, " "), Invocation: api.InvocationModel}
	if c.Bool("user") {
		p.Invocation = api.InvocationUser
	}
	var (
		res *api.ActivateResult
		err error
	)
	if c.Bool("daemon") {
		cl, derr := dialDaemon(c)
		if derr != nil {
			return derr
		}
		defer cl.Close()
		sid, serr := cl.NewSession(c.Context)
		if serr != nil {
			return exitCode(1, "sessions.create: %v", serr)
		}
		defer cl.CloseSession(context.WithoutCancel(c.Context), api.Peer{}, api.SessionParams{SessionID: sid})
		p.SessionID = sid
		res, err = cl.ActivateSkill(c.Context, api.Peer{}, p)
	} else {
		svc, _, done, lerr := oneShotService(c, true)
		if lerr != nil {
			return lerr
		}
		defer done()
		me := stack.SelfPeer()
		ses, serr := svc.CreateSession(c.Context, me, api.CreateSessionParams{})
		if serr != nil {
			return exitCode(1, "%v", serr)
		}
		p.SessionID = ses.SessionID
		res, err = svc.ActivateSkill(c.Context, me, p)
	}
	if err != nil {
		return exitCode(1, "skills render %s: %v", name, err)
	}
	if c.Bool("json") {
		return printJSON(c, res)
	}
	fmt.Fprint(c.App.Writer, res.Body)
	if !strings.HasSuffix(res.Body, "\n") {
		fmt.Fprintln(c.App.Writer)
	}
	return nil
}

func skillsLock(c *cli.Context) error {
	p := api.LockParams{Names: c.Args().Slice()}
	var (
		res *api.LockResult
		err error
	)
	if c.Bool("daemon") {
		if c.IsSet("lock") || c.IsSet("root") {
			return exitCode(2, "usage: with --daemon the daemon's roots and lock file are used; drop --root and --lock")
		}
		cl, derr := dialDaemon(c)
		if derr != nil {
			return derr
		}
		defer cl.Close()
		res, err = cl.LockSkills(c.Context, api.Peer{}, p)
	} else {
		svc, _, done, lerr := oneShotService(c, false)
		if lerr != nil {
			return lerr
		}
		defer done()
		res, err = svc.LockSkills(c.Context, stack.SelfPeer(), p)
	}
	if err != nil {
		return exitCode(1, "skills lock: %v", err)
	}
	for _, pn := range res.Pinned {
		was := ""
		if pn.Previous != "" && pn.Previous != pn.Digest {
			was = " (was " + pn.Previous + ")"
		}
		fmt.Fprintf(c.App.Writer, "%s\t%s%s\n", pn.Name, pn.Digest, was)
	}
	fmt.Fprintf(c.App.ErrWriter, "pinned %d skill(s) in %s\n", len(res.Pinned), res.LockFile)
	return nil
}

func skillsDiff(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, "usage: skillbox skills diff [--root DIR]... [--lock FILE] NAME")
	}
	cfg, err := loadConfig(c.String("config"))
	if err != nil {
		return exitCode(1, "%v", err)
	}
	lockPath := cfg.Skills.LockFile
	if c.IsSet("lock") {
		lockPath = c.String("lock")
	}
	reg, err := openRegistry(c.Context, cfg, c.StringSlice("root"), newLogger("skillbox", hclog.Error, os.Stderr))
	if err != nil {
		return exitCode(1, "indexing skills: %v", err)
	}
	name := c.Args().First()
	sk, err := reg.Get(name)
	if err != nil {
		return exitCode(1, "%v", err)
	}
	l, err := skills.ReadLock(lockPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return exitCode(1, "%v", err)
	}
	e, ok := l.Skills[sk.Name]
	if !ok {
		return exitCode(1, "skill %q is not in the lock file %s; pin it with 'skillbox skills lock --lock %s %s'", sk.Name, lockPath, lockPath, sk.Name)
	}
	cur, err := skills.Manifest(sk.Dir)
	if err != nil {
		return exitCode(1, "%v", err)
	}
	changes := skills.DiffManifests(e.Files, cur)
	if c.Bool("json") {
		return printJSON(c, map[string]any{"skill": sk.Name, "locked_digest": e.Digest, "current_digest": sk.Digest,
			"approved_by": e.ApprovedBy, "approved_at": e.ApprovedAt, "changes": changes})
	}
	fmt.Fprintf(c.App.Writer, "skill %s\nlocked:  %s (approved by %s, %s)\ncurrent: %s\n", sk.Name, e.Digest, e.ApprovedBy, e.ApprovedAt.Format("2006-01-02 15:04:05Z07:00"), sk.Digest)
	if e.Digest == sk.Digest {
		fmt.Fprintln(c.App.Writer, "unchanged")
		return nil
	}
	for _, ch := range changes {
		fmt.Fprintf(c.App.Writer, "%-8s %s\n", ch.Change, ch.Path)
	}
	if len(changes) == 0 {
		fmt.Fprintln(c.App.Writer, "the files' contents are the same; modes, links or empty directories changed")
	}
	return nil
}
