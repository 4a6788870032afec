package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox"
	"github.com/skillbox/skillbox/sandbox/audit"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run one skill script in a fresh sandbox, the way the daemon would",
		ArgsUsage: "SKILL SCRIPT [-- ARGS...]",
		Description: "SCRIPT is relative to the skill and must lie under its scripts/ directory.\n" +
			"The interpreter and image come from the script's extension (config image blocks).\n" +
			"The command exits with the script's exit code (128+N when killed by signal N).",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "root", Usage: "skill root `DIR` (repeatable; later roots override earlier); default: the config's skills.roots"},
			&cli.StringFlag{Name: "config", Usage: "HCL config `FILE` (policy, limits, images, audit_dir); default: built-in defaults"},
			&cli.StringFlag{Name: "runtime", Usage: "runsc, runc (default: the config's daemon.runtime, runsc)"},
			&cli.DurationFlag{Name: "timeout", Usage: "wall-clock limit (may only lower the policy's)"},
			&cli.StringFlag{Name: "memory", Usage: "memory limit `SIZE`, e.g. 256MiB (may only lower the policy's)"},
			&cli.Int64Flag{Name: "pids", Usage: "process limit (may only lower the policy's)"},
			&cli.Float64Flag{Name: "cpus", Usage: "CPU limit (may only lower the policy's)"},
			&cli.StringSliceFlag{Name: "env", Usage: "`K=V` passed to the script (repeatable; dangerous names such as LD_PRELOAD are refused)"},
			&cli.StringSliceFlag{Name: "file", Usage: "host `PATH` copied into the run's working directory under its base name (repeatable)"},
			&cli.StringFlag{Name: "outputs", Usage: "`DIR` that receives the files the script wrote to outputs/"},
			&cli.BoolFlag{Name: "network", Usage: "ask for network access (a policy rule must allow it)"},
			&cli.BoolFlag{Name: "no-build", Usage: "fail instead of building a missing image"},
			&cli.BoolFlag{Name: "yes", Usage: "confirm, as the person at this terminal, a run that policy marks as needing confirmation"},
			&cli.BoolFlag{Name: "json", Usage: "print the full structured result as JSON instead of streaming the output"},
			&cli.StringFlag{Name: "images", Usage: "image store `DIR` (default: the config's images.dir, or $SKILLBOX_IMAGES)"},
		},
		Action: runAction,
	}
}

func runAction(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) < 2 {
		return exitCode(2, "usage: skillbox run [flags] SKILL SCRIPT [-- ARGS...] (e.g. skillbox run --root ./skills pdf scripts/extract.py -- in.pdf)")
	}
	skillName, script, scriptArgs := args[0], args[1], args[2:]
	if len(scriptArgs) > 0 && scriptArgs[0] == "--" {
		scriptArgs = scriptArgs[1:]
	}
	if strings.HasPrefix(skillName, "-") || strings.HasPrefix(script, "-") {
		return exitCode(2, "usage: flags go before SKILL SCRIPT; script arguments after --")
	}

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	log := newLogger("skillbox", hclog.Warn, os.Stderr)
	cfg, err := loadConfig(c.String("config"))
	if err != nil {
		return err
	}
	reg, err := openRegistry(ctx, cfg, c.StringSlice("root"), log)
	if err != nil {
		return err
	}
	sk, err := reg.Get(skillName)
	if err != nil {
		return err
	}

	req := sandbox.RunRequest{Skill: sk, Script: script, Args: scriptArgs, Network: c.Bool("network")}
	if req.Limits, err = limitsFromFlags(c); err != nil {
		return exitCode(2, "%v", err)
	}
	if req.Env, err = envFromFlags(c.StringSlice("env")); err != nil {
		return exitCode(2, "%v", err)
	}
	if req.Files, err = filesFromFlags(c.StringSlice("file")); err != nil {
		return err
	}
	if !c.Bool("json") {
		req.Stdout, req.Stderr = os.Stdout, os.Stderr
	}
	req.Peer = selfPeer()

	auditLog, err := openAudit(cfg, log)
	if err != nil {
		return err
	}
	if auditLog != nil {
		defer auditLog.Close()
	}
	eng, err := newEngine(cfg, engineOptions{
		runtime: c.String("runtime"), imageDir: c.String("images"), noBuild: c.Bool("no-build"),
		progress: os.Stderr, audit: auditLog,
	}, log)
	if err != nil {
		return err
	}

	// The same policy as the daemon: deny refuses; confirm needs --yes, the
	// person at the terminal being the one who confirms.
	dec, err := eng.Decide(ctx, sk, "skills.run_script", nil, audit.Record{Peer: req.Peer})
	if err != nil {
		return err
	}
	switch dec.Effect {
	case policy.EffectDeny:
		return fmt.Errorf("skills.run_script for skill %q is denied: %s (%s)", sk.Name, dec.Reason, dec.Rule)
	case policy.EffectConfirm:
		if !c.Bool("yes") {
			return fmt.Errorf("running scripts of skill %q needs confirmation (%s): re-run with --yes to confirm it yourself", sk.Name, dec.Rule)
		}
	}
	plan, err := eng.Prepare(req)
	if err != nil {
		return err
	}
	if plan.Network {
		if nd := cfg.Decide(policy.Request{Skill: sk.Name, AllowedTools: sk.AllowedTools, Tool: "network"}); nd.Effect == policy.EffectConfirm && !c.Bool("yes") {
			return fmt.Errorf("network access for skill %q needs confirmation (%s): re-run with --yes to confirm it yourself", sk.Name, nd.Rule)
		}
	}
	out, err := eng.Execute(ctx, plan)
	if err != nil {
		return err
	}
	res := out.Result

	var saved []string
	if dir := c.String("outputs"); dir != "" && len(res.Outputs) > 0 {
		if saved, err = saveOutputs(dir, res.Outputs); err != nil {
			return err
		}
	}

	if c.Bool("json") {
		r := struct {
			sandbox.Result
			RuntimeVersion string   `json:"runtime_version"`
			SavedOutputs   []string `json:"saved_outputs,omitempty"`
		}{sandbox.ResultOf(out, false), res.RuntimeVersion, saved}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		if res.StdoutTruncated || res.StderrTruncated {
			fmt.Fprintf(os.Stderr, "skillbox: output was truncated at the configured cap\n")
		}
		if len(res.Outputs) > 0 && c.String("outputs") == "" {
			fmt.Fprintf(os.Stderr, "skillbox: the script wrote %d file(s) to outputs/; pass --outputs DIR to keep them\n", len(res.Outputs))
		}
		switch res.Reason {
		case runtime.ReasonExit:
		case runtime.ReasonTimeout:
			fmt.Fprintf(os.Stderr, "skillbox: the script was killed after its %s time limit\n", plan.Limits.Timeout)
		case runtime.ReasonOOM:
			fmt.Fprintf(os.Stderr, "skillbox: the script was killed: it exceeded its memory limit (%d MiB)\n", plan.Limits.MemoryBytes>>20)
		case runtime.ReasonPids:
			fmt.Fprintf(os.Stderr, "skillbox: the script hit its process limit (%d)\n", plan.Limits.Pids)
		case runtime.ReasonOutputCap:
			fmt.Fprintf(os.Stderr, "skillbox: the script was killed: its output exceeded the cap\n")
		default:
			fmt.Fprintf(os.Stderr, "skillbox: the run ended: %s\n", res.Reason)
		}
	}
	if code := scriptExitCode(res); code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// scriptExitCode is what the shell would report for the script.
func scriptExitCode(res *runtime.Result) int {
	if res.Signal != "" {
		if n := signalNumber(res.Signal); n > 0 {
			return 128 + n
		}
		return 137
	}
	return res.ExitCode
}

func signalNumber(name string) int {
	return int(unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(name), "SIG")))
}

func limitsFromFlags(c *cli.Context) (runtime.Limits, error) {
	var l runtime.Limits
	l.Timeout = c.Duration("timeout")
	if s := c.String("memory"); s != "" {
		n, err := policy.ParseSize(s)
		if err != nil {
			return l, fmt.Errorf("--memory %q: %v (e.g. 256MiB)", s, err)
		}
		l.MemoryBytes = n
	}
	l.Pids = c.Int64("pids")
	l.CPUs = c.Float64("cpus")
	return l, nil
}

func envFromFlags(kvs []string) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		env[k] = v
	}
	return env, nil
}

// maxInputFile bounds one --file; the workdir's tmpfs caps the total.
const maxInputFile = 64 << 20

func filesFromFlags(paths []string) ([]runtime.InputFile, error) {
	var out []runtime.InputFile
	seen := map[string]bool{}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", p, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("--file %s: not a regular file", p)
		}
		if st.Size() > maxInputFile {
			return nil, fmt.Errorf("--file %s: %d bytes is over the %d byte limit", p, st.Size(), maxInputFile)
		}
		name := filepath.Base(p)
		if seen[name] {
			return nil, fmt.Errorf("--file %s: another --file already has the base name %q", p, name)
		}
		seen[name] = true
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", p, err)
		}
		out = append(out, runtime.InputFile{Name: name, Data: data, Mode: uint32(st.Mode().Perm())})
	}
	return out, nil
}

// saveOutputs writes collected outputs under dir without ever leaving it.
func saveOutputs(dir string, outs []runtime.OutputFile) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--outputs %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("--outputs %s: %w", dir, err)
	}
	defer root.Close()
	var saved []string
	for _, o := range outs {
		if d := filepath.Dir(o.Path); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return saved, fmt.Errorf("--outputs: %s: %w", o.Path, err)
			}
		}
		if err := root.WriteFile(o.Path, o.Data, 0o644); err != nil {
			return saved, fmt.Errorf("--outputs: %s: %w", o.Path, err)
		}
		saved = append(saved, filepath.Join(dir, o.Path))
	}
	return saved, nil
}

func selfPeer() *audit.Peer {
	return &audit.Peer{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: int32(os.Getpid()), Process: "skillbox"}
}
