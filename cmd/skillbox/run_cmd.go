package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unicode"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
	"github.com/skillbox/skillbox/skills"
)

// exitTimeout is the exit code of a run that hit its time limit but whose
// script still exited 0 (it caught SIGTERM): like timeout(1), a run that
// was cut short must not look like a success.
const exitTimeout = 124

// exitOutputsTruncated is the exit code of a run whose script exited 0 but
// whose outputs an output cap cut short: files are missing, so the run
// must not look like a success.
const exitOutputsTruncated = 3

// maxOutputsListed bounds how many outputs the terminal report names one
// by one (--json lists them all).
const maxOutputsListed = 20

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run one skill script in a fresh sandbox, the way the daemon would",
		ArgsUsage: "SKILL|SKILLDIR SCRIPT [-- ARGS...]",
		Description: "SKILL is a skill's name in the skill roots, or the path of a skill directory\n" +
			"(anything with a / in it, e.g. ./my-skill). SCRIPT is any file of the skill, relative\n" +
			"to its root (scripts/fill.py, core/gif.py, ...), unless policy restricts the\n" +
			"directories scripts may run from (script_dirs). The interpreter and image come from\n" +
			"the script's extension (config image blocks), or from its #! line when it has none;\n" +
			"a missing image is built first.\n" +
			"Flags go before SKILL; everything after SCRIPT (after an optional --) goes to the script.\n" +
			"\n" +
			"Inside the sandbox: the skill is mounted read-only at /skill (the script runs as\n" +
			"/skill/SCRIPT, and /skill and the script's directory are on PYTHONPATH/NODE_PATH, so\n" +
			"'from scripts.utils import x' works); the working directory is /work, the script's\n" +
			"cwd, where --file puts its inputs; HOME is /tmp (writable, cleared after the run).\n" +
			"Outputs are every file the script created or changed anywhere in /work (outputs/ is\n" +
			"a convention, not a limit); they are listed with their paths relative to /work, and\n" +
			"--outputs DIR keeps them. Symlinks and special files are reported, never followed.\n" +
			"\n" +
			"The script's stdout and stderr stream to this command's stdout and stderr (--json\n" +
			"prints the whole result as one JSON object instead). The command exits with the\n" +
			"script's exit code (128+N when killed by signal N, 124 when it outlived its time\n" +
			"limit yet exited 0, 3 when it exited 0 but an output cap (limits output_files,\n" +
			"output_bytes, output_file_bytes) left files out, 130 when interrupted with Ctrl-C,\n" +
			"which removes the sandbox); errors of skillbox itself exit 1, usage errors 2.\n" +
			"Sandboxes need root: run it with sudo.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "root", Usage: "skill root `DIR` (repeatable; later roots override earlier); default: the config's skills.roots"},
			&cli.StringFlag{Name: "config", Usage: "HCL config `FILE` (policy, limits, images, audit_dir); default: built-in defaults"},
			&cli.StringFlag{Name: "runtime", Usage: "`NAME` of the sandbox runtime: runsc, runc, containerd or kubernetes (default: the config's daemon.runtime, runsc)"},
			&cli.StringFlag{Name: "containerd-address", Usage: "containerd's socket `SOCK` for --runtime containerd (default: the config's runtime \"containerd\" address, /run/containerd/containerd.sock)"},
			&cli.DurationFlag{Name: "timeout", Usage: "wall-clock limit, e.g. 10s (may only lower the policy's)"},
			&cli.StringFlag{Name: "memory", Usage: "memory limit `SIZE`, e.g. 256MiB (may only lower the policy's)"},
			&cli.Int64Flag{Name: "pids", Usage: "process limit (may only lower the policy's)"},
			&cli.Float64Flag{Name: "cpus", Usage: "CPU limit, e.g. 0.5 (may only lower the policy's)"},
			&cli.StringSliceFlag{Name: "env", Usage: "`K=V` passed to the script (repeatable; names such as LD_PRELOAD that load other code are refused)"},
			&cli.StringFlag{Name: "stdin", Usage: "`FILE` whose bytes are the script's standard input (- for this terminal's stdin); default: none"},
			&cli.StringSliceFlag{Name: "file", Usage: "host `PATH[:NAME]` copied into the run's working directory (/work, the script's cwd) under its base name, or under the relative NAME (may contain /); a directory is copied whole, symlinks in it as symlinks (never followed), special files refused (repeatable)"},
			&cli.StringFlag{Name: "outputs", Usage: "`DIR` that receives every file the script created or changed in /work, at its relative path (created if missing; symlinks in DIR are never written through)"},
			&cli.StringFlag{Name: "workdir", Usage: "host `DIR` the run works on as /work: its files are copied in before the run, and the files the run created, changed or deleted are applied back after it where policy lets (a host directory is read-only unless a policy rule sets workspace = \"write\"); a change made on the host meanwhile is a conflict, never overwritten; .git/, .env* and key files stay out"},
			&cli.StringSliceFlag{Name: "input", Usage: "with --workdir: copy in only this workspace `PATH` or glob (a directory brings everything under it; repeatable; default: the whole directory)"},
			&cli.BoolFlag{Name: "network", Usage: "ask for network access (a policy rule must allow it)"},
			&cli.BoolFlag{Name: "no-build", Usage: "fail instead of building a missing image"},
			&cli.BoolFlag{Name: "yes", Usage: "confirm, as the approver at this terminal, a run that policy marks as needing confirmation"},
			&cli.BoolFlag{Name: "json", Usage: "print the full structured result as JSON instead of streaming the output"},
			&cli.StringFlag{Name: "images", Usage: "image store `DIR` (default: $SKILLBOX_IMAGES, else the config's images.dir)"},
		},
		// Flag errors are one line and exit 2, like every other usage error.
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return exitCode(2, "usage: %v (see 'skillbox run --help')", err)
		},
		Action: withoutRoot(runAction, nil),
	}
}

// runOptions are the validated flags of one `skillbox run`.
type runOptions struct {
	skill, script string
	args          []string
	limits        runtime.Limits
	env           map[string]string
	files         []runtime.InputFile
	outputs       string
	workdir       string   // --workdir: the host workspace
	inputs        []string // --input: what of it the run is given
	runtime       string
	containerd    string // --containerd-address
	stdin         []byte
}

// parseRunArgs splits the positional arguments and validates every flag that
// can be checked without touching a skill, an image or a sandbox. Its errors
// are usage errors (exit 2) except for unreadable --file paths (exit 1).
func parseRunArgs(c *cli.Context) (*runOptions, error) {
	args := c.Args().Slice()
	if len(args) < 2 {
		return nil, exitCode(2, "usage: skillbox run [flags] SKILL SCRIPT [-- ARGS...] (SKILL is a skill name or directory: e.g. skillbox run --root ./skills pdf scripts/extract.py -- in.pdf, or skillbox run ./pdf scripts/extract.py)")
	}
	if strings.HasPrefix(args[0], "-") || strings.HasPrefix(args[1], "-") {
		return nil, exitCode(2, "usage: flags go before SKILL SCRIPT, script arguments after them (or after --): skillbox run [flags] SKILL SCRIPT [-- ARGS...]")
	}
	o, err := parseRunFlags(c, args[2:])
	if err != nil {
		return nil, err
	}
	o.skill, o.script = args[0], args[1]
	return o, nil
}

// parseRunFlags validates the flags `skillbox run` and `skillbox exec`
// share; args are the script's arguments (a leading -- is dropped).
func parseRunFlags(c *cli.Context, args []string) (*runOptions, error) {
	o := &runOptions{args: args}
	if len(o.args) > 0 && o.args[0] == "--" {
		o.args = o.args[1:]
	}
	var err error
	if o.limits, err = limitsFromFlags(c); err != nil {
		return nil, exitCode(2, "%v", err)
	}
	if o.env, err = envFromFlags(c.StringSlice("env")); err != nil {
		return nil, exitCode(2, "%v", err)
	}
	if o.runtime = c.String("runtime"); o.runtime != "" && !slices.Contains(runtime.Names(), o.runtime) {
		return nil, exitCode(2, "--runtime %q: unknown runtime: choose one of %s", o.runtime, strings.Join(runtime.Names(), ", "))
	}
	if o.containerd = c.String("containerd-address"); o.containerd != "" {
		rt := o.runtime
		if rt == "" {
			rt = "containerd" // the flag says which runtime is meant
			o.runtime = rt
		}
		if rt != "containerd" {
			return nil, exitCode(2, "--containerd-address is for --runtime containerd, not %s", rt)
		}
	}
	if o.files, err = filesFromFlags(c.StringSlice("file")); err != nil {
		if errors.Is(err, errFileFlagUsage) {
			return nil, exitCode(2, "%v", err)
		}
		return nil, err
	}
	if o.stdin, err = stdinFromFlag(c.String("stdin")); err != nil {
		return nil, err
	}
	o.outputs = c.String("outputs")
	o.workdir, o.inputs = c.String("workdir"), c.StringSlice("input")
	if len(o.inputs) > 0 && o.workdir == "" {
		return nil, exitCode(2, "--input names paths of the workspace: give the directory with --workdir DIR")
	}
	return o, nil
}

func runAction(c *cli.Context) error {
	o, err := parseRunArgs(c)
	if err != nil {
		return err
	}
	if err := runScript(c, o); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return cliError(err)
	}
	return nil
}

func runScript(c *cli.Context, o *runOptions) error {
	return runLocal(c, o, "skillbox run", func(ctx context.Context, cfg *policy.Config, log hclog.Logger) (service.RunRequest, service.SkillIndex, error) {
		sk, index, err := resolveSkill(ctx, cfg, c.StringSlice("root"), o.skill, log)
		if err != nil {
			return service.RunRequest{}, nil, err
		}
		return service.RunRequest{Skill: sk, Script: o.script, Network: c.Bool("network")}, index, nil
	})
}

// runLocal runs what request makes of the registry (a script, or code),
// with o's arguments, limits, env, files and stdin, through the daemon's
// authorization path, and reports it: `skillbox run` and `skillbox exec`.
func runLocal(c *cli.Context, o *runOptions, method string, request func(context.Context, *policy.Config, hclog.Logger) (service.RunRequest, service.SkillIndex, error)) error {
	ctx, interrupted, stop := interruptContext(c.Context)
	defer stop()
	// A closed stdout (skillbox run … | head) must not kill skillbox with
	// SIGPIPE in the middle of a run: the sandbox would be left behind.
	// Catching the signal (rather than ignoring it, which children would
	// inherit) turns it into write errors, which the stream sinks swallow.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)

	log := newLogger("skillbox", hclog.Warn, os.Stderr)
	cfg, err := loadConfig(c.String("config"))
	if err != nil {
		return err
	}
	// Make sure the outputs can be kept before anything runs.
	if o.outputs != "" {
		if err := prepareOutputsDir(o.outputs); err != nil {
			return err
		}
	}
	req, index, err := request(ctx, cfg, log)
	if err != nil {
		return err
	}

	// Failures come back as the one-line error; the engine's and the
	// service's own error logs would say the same again
	// (SKILLBOX_LOG_LEVEL=debug shows them).
	quiet := newLogger("skillbox", hclog.Off, os.Stderr)
	noBuild := c.Bool("no-build")
	st, err := stack.New(ctx, stack.Options{
		Mode: stack.OneShot, Config: cfg, Logger: log, RunLogger: quiet, Index: index,
		Runtime: o.runtime, ContainerdAddress: o.containerd, ImageDir: c.String("images"), NoBuild: noBuild,
		Progress: os.Stderr,
		Images: func(si *runner.StoreImages) runner.ImageSource {
			return &cliImages{StoreImages: si, noBuild: noBuild}
		},
	})
	if err != nil {
		return err
	}
	defer st.Close()
	eng := st.Engine()

	req.Args, req.Env, req.Files, req.Limits, req.Stdin = o.args, o.env, o.files, o.limits, o.stdin
	if o.workdir != "" {
		req.Workspace = &runner.WorkspaceRequest{Dir: o.workdir, Kind: api.WorkspaceHost, Inputs: o.inputs, Owner: service.WorkspaceOwner(o.workdir)}
	}
	if !c.Bool("json") {
		req.Stdout, req.Stderr = &liveSink{w: os.Stdout}, &liveSink{w: os.Stderr}
	}
	if err := rootCheck("run", eng.Runtime().Name(), os.Geteuid()); err != nil {
		return err
	}
	// The terminal's run is a load and a run: a skill's dependency layer
	// is built (or found) now, before the run, never inside it.
	if eng.Deps() != nil && cfg.Deps.BuildOnLoad {
		loaded := []*skills.Skill{req.Skill}
		if req.Code != nil {
			loaded = req.Code.Skills
		}
		for _, sk := range loaded {
			if sk == nil {
				continue
			}
			if _, err := eng.Deps().Build(ctx, sk, sk.Dir); err != nil {
				return err
			}
		}
	}
	// The daemon's authorization path, with the person at the terminal as
	// the approver (--yes) instead of a confirmation request.
	svc := st.Service()
	out, err := svc.Run(ctx, stack.SelfPeer(), req, service.RunOptions{
		Method:          method,
		SelfApprove:     c.Bool("yes"),
		SelfApproveHint: "re-run with --yes to confirm it yourself",
		Authorized: func(plan *service.Plan) {
			if !c.Bool("json") {
				for _, w := range loweredLimits(o.limits, plan.Limits()) {
					fmt.Fprintln(os.Stderr, "skillbox: "+w)
				}
			}
		},
	})
	if err != nil {
		return err
	}
	res := &out.Result

	var saved []string
	if o.outputs != "" {
		if saved, err = saveOutputs(o.outputs, res.Outputs); err != nil {
			return err
		}
	}

	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(newRunJSON(out, saved)); err != nil {
			return err
		}
	} else {
		reportRun(os.Stderr, out, o.outputs)
	}
	code := scriptExitCode(res)
	if n := interrupted(); n > 0 && res.Reason == runtime.ReasonKilled {
		code = 128 + n // like any command stopped with Ctrl-C
	}
	if code == 0 && (res.OutputsTruncated || (out.Workspace != nil && len(out.Workspace.Conflicts) > 0)) {
		code = exitOutputsTruncated
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// interruptContext is cancelled by the first SIGINT or SIGTERM, which stops
// the run and removes its sandbox; interrupted reports that signal's number.
// A second one is not caught: it ends skillbox at once, the way it would end
// any command.
func interruptContext(parent context.Context) (ctx context.Context, interrupted func() int, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	var got atomic.Int32
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			if n, ok := s.(syscall.Signal); ok {
				got.Store(int32(n))
			}
			signal.Stop(ch)
			cancel()
		case <-done:
		}
	}()
	return ctx, func() int { return int(got.Load()) }, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}

// reportRun tells the person at the terminal what the streams do not: why a
// run ended early, truncation, and outputs that were or were not kept.
func reportRun(w io.Writer, out *service.Finished, outputsDir string) {
	res, lim := &out.Result, out.Plan.Limits()
	for _, n := range out.Warnings {
		fmt.Fprintf(w, "skillbox: warning: %s\n", n)
	}
	if res.StdoutTruncated || res.StderrTruncated {
		fmt.Fprintf(w, "skillbox: output was truncated at the cap (stdout %s, stderr %s per run)\n", policy.FormatSize(lim.StdoutBytes), policy.FormatSize(lim.StderrBytes))
	}
	if ws := out.Workspace; ws != nil {
		reportWorkspace(w, ws)
		if ws.Mode == api.WorkspaceWrite && ws.NotApplied == "" {
			outputsDir = "-" // the workspace has them
		}
	}
	reportOutputs(w, res, lim, outputsDir)
	if none := runtime.Unenforced(res.LimitsEnforcedBy); len(none) > 0 {
		fmt.Fprintf(w, "skillbox: not enforced on this host: %s (without root or a delegated cgroup there is none to hold them: run as root, or start skillbox in a cgroup of its own with systemd-run --user --scope -p Delegate=yes; limits_enforced_by in --json says what held each limit)\n", strings.Join(none, ", "))
	}
	switch res.Reason {
	case runtime.ReasonExit:
	case runtime.ReasonTimeout:
		fmt.Fprintf(w, "skillbox: the script was killed after its %s time limit\n", lim.Timeout)
	case runtime.ReasonOOM:
		fmt.Fprintf(w, "skillbox: the script was killed: it exceeded its memory limit (%s)\n", policy.FormatSize(lim.MemoryBytes))
	case runtime.ReasonPids:
		fmt.Fprintf(w, "skillbox: the script hit its process limit (%d)\n", lim.Pids)
	case runtime.ReasonOutputCap:
		fmt.Fprintf(w, "skillbox: the script was killed: its output exceeded the cap\n")
	case runtime.ReasonEgressCap:
		hit := fmt.Sprintf("%d connections", lim.EgressConnections)
		if res.Egress != nil && res.Egress.LimitHit == egress.LimitBytesOut {
			hit = policy.FormatSize(lim.EgressBytesOut) + " sent"
		}
		fmt.Fprintf(w, "skillbox: the script was killed: it reached its network cap (%s per run; limits egress_connections, egress_bytes_out)\n", hit)
	case runtime.ReasonKilled:
		fmt.Fprintf(w, "skillbox: the run was interrupted and its sandbox removed\n")
	default:
		fmt.Fprintf(w, "skillbox: the run ended: %s\n", res.Reason)
	}
	if out.Hint != "" {
		fmt.Fprintf(w, "skillbox: %s\n", out.Hint)
	}
}

// reportOutputs says what the script left in /work: the files kept (by
// their paths relative to /work, the first maxOutputsListed by name), or
// how many were left behind and how to keep them; entries not collected;
// and, never silently, an output cap that left files out.
func reportOutputs(w io.Writer, res *runtime.Result, lim runtime.Limits, outputsDir string) {
	n := len(res.Outputs)
	switch {
	case outputsDir == "-":
	case n > 0 && outputsDir == "":
		fmt.Fprintf(w, "skillbox: the script left %d file(s) in /work (%s); pass --outputs DIR to keep them\n", n, outputNames(res.Outputs, 3))
	case n > 0:
		fmt.Fprintf(w, "skillbox: kept %d output file(s) in %s:\n", n, outputsDir)
		for i, f := range res.Outputs {
			if i == maxOutputsListed {
				fmt.Fprintf(w, "skillbox:   ... and %d more (--json lists them all)\n", n-i)
				break
			}
			fmt.Fprintf(w, "skillbox:   %s (%s)\n", quoteUnprintable(f.Path), policy.FormatSize(f.Size))
		}
	}
	for _, s := range res.OutputsSkipped {
		fmt.Fprintf(w, "skillbox: in /work: %s\n", s)
	}
	if res.OutputsTruncated {
		fmt.Fprintf(w, "skillbox: outputs truncated by the %s cap (%s): %d file(s) of %s left out; raise limits %s in the config or have the script write less\n",
			res.OutputsTruncatedBy, capValue(res.OutputsTruncatedBy, lim), res.OutputsOmittedFiles, policy.FormatSize(res.OutputsOmittedBytes), res.OutputsTruncatedBy)
	}
}

// capValue shows the limit an output cap stands for.
func capValue(name string, lim runtime.Limits) string {
	switch name {
	case runtime.CapOutputFiles:
		return fmt.Sprintf("%d files", lim.OutputFiles)
	case runtime.CapOutputBytes:
		return policy.FormatSize(lim.OutputBytes) + " in all"
	case runtime.CapOutputFileBytes:
		return policy.FormatSize(lim.OutputFileBytes) + " per file"
	}
	return "?"
}

// outputNames lists the first max output paths for a one-line report.
func outputNames(outs []runtime.OutputFile, max int) string {
	var names []string
	for i, f := range outs {
		if i == max {
			names = append(names, "…")
			break
		}
		names = append(names, quoteUnprintable(f.Path))
	}
	return strings.Join(names, ", ")
}

// quoteUnprintable quotes a script-chosen name when it holds anything a
// terminal could misread.
func quoteUnprintable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// runJSON is what --json prints: the daemon's run_script result, with its
// outputs' contents left out (they are saved with --outputs), plus the files
// the CLI saved.
type runJSON struct {
	api.RunScriptResult
	SavedOutputs []string `json:"saved_outputs"`
}

func newRunJSON(o *service.Finished, saved []string) *runJSON {
	return &runJSON{RunScriptResult: service.ResultOf(o, 0), SavedOutputs: append([]string{}, saved...)}
}

// scriptExitCode is what the shell would report for the script; a run that
// ended for a reason other than its own exit is never reported as success.
func scriptExitCode(res *runtime.Result) int {
	code := res.ExitCode
	if res.Signal != "" {
		code = 137
		if n := signalNumber(res.Signal); n > 0 {
			code = 128 + n
		}
	}
	if code == 0 && res.Reason != runtime.ReasonExit && res.Reason != "" {
		if res.Reason == runtime.ReasonTimeout {
			return exitTimeout
		}
		return 1
	}
	return code
}

func signalNumber(name string) int {
	return int(unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(name), "SIG")))
}

// limitsFromFlags reads the limit flags; zero means "not given".
func limitsFromFlags(c *cli.Context) (runtime.Limits, error) {
	var l runtime.Limits
	if c.IsSet("timeout") {
		l.Timeout = c.Duration("timeout")
		if l.Timeout <= 0 {
			return l, fmt.Errorf("--timeout %s: must be positive, e.g. 10s", l.Timeout)
		}
	}
	if c.IsSet("memory") {
		n, err := parseMemory(c.String("memory"))
		if err != nil {
			return l, err
		}
		l.MemoryBytes = n
	}
	if c.IsSet("pids") {
		l.Pids = c.Int64("pids")
		if l.Pids <= 0 {
			return l, fmt.Errorf("--pids %d: must be at least 1", l.Pids)
		}
	}
	if c.IsSet("cpus") {
		l.CPUs = c.Float64("cpus")
		if !(l.CPUs > 0) || math.IsInf(l.CPUs, 0) {
			return l, fmt.Errorf("--cpus %v: must be a positive number, e.g. 0.5 or 2", l.CPUs)
		}
	}
	return l, nil
}

func parseMemory(s string) (int64, error) {
	n, err := policy.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("--memory: %v", err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("--memory %q: must be positive, e.g. 256MiB", s)
	}
	return n, nil
}

// loweredLimits says which requested limits policy did not grant because it
// sets a stricter one (flags may only lower the policy's limits).
func loweredLimits(req, got runtime.Limits) []string {
	var out []string
	if req.Timeout > 0 && got.Timeout < req.Timeout {
		out = append(out, fmt.Sprintf("--timeout %s is above the policy's limit; using %s", req.Timeout, got.Timeout))
	}
	if req.MemoryBytes > 0 && got.MemoryBytes < req.MemoryBytes {
		out = append(out, fmt.Sprintf("--memory %s is above the policy's limit; using %s", policy.FormatSize(req.MemoryBytes), policy.FormatSize(got.MemoryBytes)))
	}
	if req.Pids > 0 && got.Pids < req.Pids {
		out = append(out, fmt.Sprintf("--pids %d is above the policy's limit; using %d", req.Pids, got.Pids))
	}
	if req.CPUs > 0 && got.CPUs < req.CPUs {
		out = append(out, fmt.Sprintf("--cpus %v is above the policy's limit; using %v", req.CPUs, got.CPUs))
	}
	return out
}

// envFromFlags parses --env K=V, refusing malformed, repeated and dangerous
// names up front with the flag in the message.
func envFromFlags(kvs []string) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: want KEY=VALUE (to pass a variable of yours, write --env %s=\"$%s\")", kv, kvName(kv), kvName(kv))
		}
		if _, dup := env[k]; dup {
			return nil, fmt.Errorf("--env %s is given twice: give each variable once", k)
		}
		if err := runtime.ValidateEnv([]string{kv}); err != nil {
			msg := errkind.Detail(err, runtime.ErrInvalidJob)
			return nil, fmt.Errorf("--env %s refused: %s; pass only settings the script itself reads", k, msg)
		}
		env[k] = v
	}
	if len(env) > 0 {
		list := make([]string, 0, len(env))
		for k, v := range env {
			list = append(list, k+"="+v)
		}
		if err := runtime.ValidateEnv(list); err != nil {
			return nil, fmt.Errorf("--env: %s", errkind.Detail(err, runtime.ErrInvalidJob))
		}
	}
	return env, nil
}

func kvName(kv string) string {
	if k, _, _ := strings.Cut(kv, "="); k != "" {
		return k
	}
	return "NAME"
}

// cliImages adds to the store's image source what a person at a terminal
// needs: a line saying a missing image is being built (the build's own
// progress follows), and with --no-build an error that says how to build it.
type cliImages struct {
	*runner.StoreImages
	noBuild bool
}

// Available implements runner.ImageChecker: with --no-build a missing
// image is refused before anything is decided, saying how to build it.
func (c *cliImages) Available(name string) error {
	if err := c.Built(name); errors.Is(err, images.ErrNotBuilt) && c.noBuild {
		return c.noBuildError(name)
	}
	return c.StoreImages.Available(name)
}

// noBuildError names the image the store lacks: the recipe the config's
// image block names (image "python" { recipe = "python-slim" }).
func (c *cliImages) noBuildError(name string) error {
	dir, recipe := c.Store.Dir(), c.Recipes[name].Name
	return fmt.Errorf("image %q is not built in %s and --no-build forbids building it: run 'skillbox images build --dir %s %s' first, or drop --no-build", recipe, dir, dir, recipe)
}

func (c *cliImages) Ensure(ctx context.Context, name string, progress io.Writer) (runtime.ImageRef, string, error) {
	if err := c.Built(name); errors.Is(err, images.ErrNotBuilt) {
		dir := c.Store.Dir()
		if c.noBuild {
			return runtime.ImageRef{}, "", c.noBuildError(name)
		}
		if progress != nil {
			fmt.Fprintf(progress, "skillbox: image %q is not built in %s yet; building it now (this takes a few minutes)\n", c.Recipes[name].Name, dir)
		}
	}
	return c.StoreImages.Ensure(ctx, name, progress)
}

// liveSink copies a stream to the terminal; once the terminal goes away
// (EPIPE) the rest is dropped, the run goes on and is still captured.
type liveSink struct {
	mu   sync.Mutex
	w    io.Writer
	dead bool
}

func (s *liveSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return len(p), nil
	}
	if _, err := s.w.Write(p); err != nil {
		s.dead = true
	}
	return len(p), nil
}

// stdinFromFlag reads what --stdin names, capped like an input file: the
// sandbox gets bytes, never the terminal itself.
func stdinFromFlag(name string) ([]byte, error) {
	if name == "" {
		return nil, nil
	}
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("--stdin %s: %w", name, err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInputFile+1))
	if err != nil {
		return nil, fmt.Errorf("--stdin %s: %w", name, err)
	}
	if len(b) > maxInputFile {
		return nil, exitCode(2, "--stdin %s: more than %d bytes", name, maxInputFile)
	}
	return b, nil
}

// reportWorkspace says what a run took from its workspace and what came
// back: the files applied (the first maxOutputsListed by name), and never
// silently a conflict, a refusal or changes not applied.
func reportWorkspace(w io.Writer, ws *api.WorkspaceReport) {
	fmt.Fprintf(w, "skillbox: workspace %s (%s, %s): %d file(s) of %s copied in", ws.Dir, ws.Mode, ws.Rule, ws.Inputs, policy.FormatSize(ws.InputBytes))
	if ws.Excluded > 0 {
		fmt.Fprintf(w, ", %d path(s) excluded", ws.Excluded)
	}
	fmt.Fprintln(w)
	if ws.NotApplied != "" {
		fmt.Fprintf(w, "skillbox: workspace: %s\n", ws.NotApplied)
	}
	for i, c := range ws.Written {
		if i == maxOutputsListed {
			fmt.Fprintf(w, "skillbox:   ... and %d more written (--json lists them all)\n", len(ws.Written)-i)
			break
		}
		verb := "changed"
		if c.Before == "" {
			verb = "new"
		}
		fmt.Fprintf(w, "skillbox:   wrote %s (%s, %s)\n", quoteUnprintable(c.Path), verb, policy.FormatSize(c.Size))
	}
	for i, c := range ws.Deleted {
		if i == maxOutputsListed {
			fmt.Fprintf(w, "skillbox:   ... and %d more deleted (--json lists them all)\n", len(ws.Deleted)-i)
			break
		}
		fmt.Fprintf(w, "skillbox:   deleted %s\n", quoteUnprintable(c.Path))
	}
	for _, c := range ws.Conflicts {
		fmt.Fprintf(w, "skillbox: workspace conflict, not applied: %s: %s\n", quoteUnprintable(c.Path), c.Why)
	}
	for _, r := range ws.Refused {
		fmt.Fprintf(w, "skillbox: workspace: %s: %s\n", quoteUnprintable(r.Path), r.Why)
	}
}
