// The CLI's shared helpers: config and logger, the errors it prints (one
// line, exit code 1), the root check, and finding the skill a command names.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/skillbox/skillbox/runtime/rootless"
	"github.com/urfave/cli/v2"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/kubernetes"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
	"github.com/skillbox/skillbox/skills"
)

// loadConfig reads the config file, or the built-in defaults when path is "".
func loadConfig(path string) (*policy.Config, error) {
	if path == "" {
		return policy.Default(), nil
	}
	cfg, err := policy.Load(path)
	if err != nil {
		return nil, configError(path, err)
	}
	return cfg, nil
}

// configError renders a config failure as one line: every problem with its
// file:line, joined, and what to run for the full explanation.
func configError(path string, err error) error {
	var ce *policy.ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) == 0 {
		return fmt.Errorf("config %s: %w", path, err)
	}
	msgs := make([]string, len(ce.Problems))
	for i, p := range ce.Problems {
		msgs[i] = strings.Join(strings.Fields(p.String()), " ")
	}
	what := "invalid config"
	if len(msgs) > 1 {
		what = fmt.Sprintf("invalid config (%d problems)", len(msgs))
	}
	return &oneLineError{msg: fmt.Sprintf("%s: %s (details: skillbox policy check %s)", what, strings.Join(msgs, "; "), path), err: err}
}

// oneLineError replaces a multi-line error's text, keeping it for errors.Is.
type oneLineError struct {
	msg string
	err error
}

func (e *oneLineError) Error() string { return e.msg }
func (e *oneLineError) Unwrap() error { return e.err }

// EnvLogLevel is the one environment variable that sets the log level of
// every skillbox command (trace, debug, info, warn, error, off).
const EnvLogLevel = "SKILLBOX_LOG_LEVEL"

// newLogger is the CLI's hclog root; level from SKILLBOX_LOG_LEVEL (default
// warn for one-shot commands, info for serve).
func newLogger(name string, def hclog.Level, w io.Writer) hclog.Logger {
	lvl := def
	if v := os.Getenv(EnvLogLevel); v != "" {
		if l := hclog.LevelFromString(v); l != hclog.NoLevel {
			lvl = l
		}
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: lvl, Output: w})
}

// openRegistry indexes the given roots (or the config's) once.
func openRegistry(ctx context.Context, cfg *policy.Config, roots []string, log hclog.Logger) (*skills.Registry, error) {
	return stack.OpenRegistry(ctx, cfg, roots, log)
}

// resolveSkill finds the skill to run: SKILL is the path of a skill
// directory when it has a / in it (./pdf, /srv/skills/pdf) or starts with
// a dot, or when no skill of that name is indexed but ./SKILL holds a
// SKILL.md; otherwise a name in the skill roots. It returns the skill and
// the index the service is given.
func resolveSkill(ctx context.Context, cfg *policy.Config, roots []string, arg string, log hclog.Logger) (*skills.Skill, service.SkillIndex, error) {
	isPath := strings.ContainsRune(arg, filepath.Separator) || strings.HasPrefix(arg, ".")
	if !isPath {
		reg, err := openRegistry(ctx, cfg, roots, log)
		if err != nil {
			return nil, nil, err
		}
		sk, err := reg.Get(arg)
		if err == nil {
			return sk, reg, nil
		}
		if _, serr := os.Stat(filepath.Join(arg, "SKILL.md")); serr != nil {
			return nil, nil, skillNotFound(err, reg.Roots())
		}
	}
	sk, err := skills.LoadDir(skillsDirOf(arg), skills.LoadOptions{AllowExtensions: true, Lenient: true})
	if err != nil {
		return nil, nil, fmt.Errorf("skill directory %s: %w (check it with 'skillbox skills validate %s')", arg, err, arg)
	}
	return sk, oneSkill{sk}, nil
}

// oneSkill is the index of a run given a skill directory.
type oneSkill struct{ sk *skills.Skill }

func (o oneSkill) Get(name string) (*skills.Skill, error) {
	if skills.NormalizeName(name) == skills.NormalizeName(o.sk.Name) {
		return o.sk, nil
	}
	return nil, errkind.Errorf(skills.ErrNotFound, "%q", name)
}

func (o oneSkill) List() []*skills.Skill { return []*skills.Skill{o.sk} }

// skillNotFound names the roots that were searched and how to list them.
func skillNotFound(err error, roots []string) error {
	if !errors.Is(err, skills.ErrNotFound) {
		return err
	}
	list := "skillbox skills list"
	for _, r := range roots {
		list += " --root " + r
	}
	msg := strings.Replace(err.Error(), "skills.list or 'skillbox skills list --root DIR'", "'"+list+"'", 1)
	var missing []string
	for _, r := range roots {
		if _, serr := os.Stat(r); serr != nil {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		msg += fmt.Sprintf(" (skill root %s does not exist: give the right one with --root DIR)", strings.Join(missing, ", "))
	}
	return &oneLineError{msg: msg, err: err}
}

// terminalKinds are the error kinds ("not found: …") that mean something to
// a host branching on kinds but only clutter a terminal; cliError prints
// their errors' messages without them.
var terminalKinds = []error{
	api.ErrNotFound, api.ErrInvalidParams, api.ErrDenied,
	api.ErrUnavailable, api.ErrLimitExceeded, api.ErrInternal,
	runtime.ErrInvalidJob, runtime.ErrUnavailable,
}

// cliError renders err as the one line the CLI prints, keeping it for
// errors.Is. Exit code 1.
func cliError(err error) error {
	msg := errkind.Detail(err, terminalKinds...)
	msg = strings.TrimSpace(strings.NewReplacer("\r\n", "; ", "\n", "; ").Replace(strings.TrimSpace(msg)))
	return &oneLineError{msg: msg, err: err}
}

// withoutRoot makes a command that starts sandboxes work for an ordinary
// user: before anything else (stdin is not read yet, no file is open) it
// re-executes skillbox in a user and mount namespace of its own and exits
// with that run's code (rootless.Enter); inside, the runtime runs gVisor
// rootless. skip, when it says so, leaves the command as it is (mcp
// --socket starts no sandbox).
func withoutRoot(action cli.ActionFunc, skip func(*cli.Context) bool) cli.ActionFunc {
	return func(c *cli.Context) error {
		if skip != nil && skip(c) {
			return action(c)
		}
		code, reexeced, err := rootless.Enter()
		if err != nil {
			return cliError(err)
		}
		if reexeced {
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		}
		return action(c)
	}
}

// rootCheck is the one check that a command which starts sandboxes has the
// privileges the runtimes need, so that a newcomer gets one line saying
// what to do instead of a permission error from deep inside a backend
// (making the bundle directory, mounts, cgroups). euid is a parameter for
// tests.
func rootCheck(command, runtimeName string, euid int) error {
	if euid == 0 || runtimeName == kubernetes.Name {
		// The kubernetes runtime makes nothing on this host: its pods run
		// on the cluster (a daemon in a pod runs as nobody).
		return nil
	}
	return fmt.Errorf("%s needs root: the %s sandbox runtime makes mounts, namespaces and cgroups that only root may, and you are uid %d; run it with sudo (sudo skillbox %s …)", command, runtimeName, euid, command)
}
