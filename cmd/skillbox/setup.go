package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/stack"
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
