package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
)

// versionCommand prints skillbox's version and the version of the sandbox
// runtime it would run scripts with (the binary the config names), so a
// report or an audit record can be matched to what was installed.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print skillbox's version and its sandbox runtime's",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "HCL config `FILE` (default: built-in defaults)"},
			&cli.StringFlag{Name: "runtime", Usage: "runtime to report instead of daemon.runtime"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c.String("config"))
			if err != nil {
				return err
			}
			name := cfg.Daemon.Runtime
			if v := c.String("runtime"); v != "" {
				name = v
			}
			out := struct {
				Version        string `json:"version"`
				Runtime        string `json:"runtime"`
				RuntimeBinary  string `json:"runtime_binary,omitempty"`
				RuntimeVersion string `json:"runtime_version,omitempty"`
				RuntimeError   string `json:"runtime_error,omitempty"`
				PinnedRunsc    string `json:"pinned_runsc"`
			}{Version: version, Runtime: name, PinnedRunsc: runtime.PinnedRunscVersion}
			out.RuntimeBinary = cfg.RuntimeOptions(name).Settings.String("binary")
			rt, err := stack.OpenRuntime(cfg, stack.RuntimeOptions{Name: name})
			if err == nil {
				ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
				out.RuntimeVersion, err = rt.Version(ctx)
				cancel()
			}
			if err != nil {
				out.RuntimeError = err.Error()
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "skillbox %s\n", out.Version)
			if out.RuntimeError != "" {
				fmt.Fprintf(w, "runtime %s: %s\n", name, out.RuntimeError)
			} else {
				fmt.Fprintf(w, "runtime %s %s (%s)\n", name, out.RuntimeVersion, out.RuntimeBinary)
			}
			fmt.Fprintf(w, "pinned runsc %s (%s)\n", runtime.PinnedRunscVersion, runtime.PinnedRunscPath())
			return nil
		},
	}
}
