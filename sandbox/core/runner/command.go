package runner

import (
	"strings"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// A skill's own shell commands (the !`command`s of its body, its hooks) run
// like its scripts: in a fresh sandbox of the shell image with the skill's
// pinned copy mounted read-only, network off, under the skill's policy
// limits tightened to the command's own, audited with run.start/run.end.
// They are never run on the host.

// CommandImage is the image a skill's commands run in.
const CommandImage = "shell"

// CommandSpec is a shell command to run for a skill instead of a script.
type CommandSpec struct {
	// Command is the shell command, run with /bin/sh -c.
	Command string
	// Label names the command in audit records and results (the run's
	// "script"), e.g. "SKILL.md !`date`" or "hooks.PreToolUse".
	Label string
	// InSkillDir runs the command with the skill mount as its working
	// directory (hooks name their scripts relative to the skill); the
	// default is the writable /work.
	InSkillDir bool
}

// prepareCommand is Prepare for a CommandSpec.
func (e *Engine) prepareCommand(req RunRequest, pol *policy.SkillPolicy) (*Plan, error) {
	c := req.Command
	if strings.TrimSpace(c.Command) == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "empty command")
	}
	if strings.ContainsRune(c.Command, 0) {
		return nil, errkind.Errorf(errkind.InvalidParams, "the command contains a NUL byte")
	}
	if req.Network {
		return nil, errkind.Errorf(errkind.Denied, "a skill's commands never get network access")
	}
	if e.pins == nil {
		return nil, errkind.Errorf(errkind.Unavailable, "the engine has no skill snapshot store")
	}
	im := e.cfg.Image(CommandImage)
	if im == nil {
		return nil, errkind.Errorf(errkind.Unavailable, "no %q image is configured for skill commands; add an image %q block", CommandImage, CommandImage)
	}
	root, err := e.pins.Pin(req.Skill)
	if err != nil {
		return nil, err
	}
	script := c.Command
	if c.InSkillDir {
		script = "cd " + runtime.SkillMount + " || exit 125\n" + script
	}
	argv := []string{"/bin/sh", "-c", script}
	limits, rules := policy.Tighten(pol.Limits.Value, req.Limits), pol.Limits.Rules
	env, err := envList(req.Env)
	if err != nil {
		return nil, err
	}
	if err := checkEnv(env, req.Env, pol); err != nil {
		return nil, err
	}
	runID := newID("run_")
	jobID := runtime.IDPrefix + strings.TrimPrefix(runID, "run_")
	if err := runtime.ValidateJob(runtime.Job{
		Sandbox:    runtime.SandboxSpec{ID: jobID, RootFS: "/", SkillDir: "/", Limits: limits},
		Invocation: runtime.Invocation{Args: argv, Env: env, Files: req.Files, Limits: limits},
	}); err != nil {
		return nil, errkind.Wrap(errkind.InvalidParams, err)
	}
	label := c.Label
	if label == "" {
		label = "command"
	}
	p := &Plan{
		runID:        runID,
		jobID:        jobID,
		request:      req,
		script:       label,
		skillRoot:    root,
		scriptSHA256: SHA256Hex([]byte(script)),
		interpreter:  policy.Interpreter{Image: im.Name, Argv: []string{"/bin/sh", "-c"}, Rule: im.Rule()},
		argv:         argv,
		env:          env,
		limits:       limits,
		limitRules:   rules,
		policy:       pol,
	}
	return p, nil
}
