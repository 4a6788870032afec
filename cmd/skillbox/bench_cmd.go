package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/frame/bench"
)

// benchCommand is package bench's command: its flags are bench.Options.
func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure run latency, throughput, registry and audit costs (ratios against baselines from the same run)",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "runs", Value: 20, Usage: "runs per latency series (median of these)"},
			&cli.StringSliceFlag{Name: "runtime", Value: cli.NewStringSlice("runsc", "runsc-debian", "runc"), Usage: "runtimes to measure cold (runsc is the pinned gVisor, runsc-debian /usr/bin/runsc; containerd as --config's runtime \"containerd\" block says)"},
			&cli.StringFlag{Name: "config", Usage: "HCL config `FILE` for the runtimes' blocks (e.g. runtime \"containerd\" { address, handler }); default: built-in defaults"},
			&cli.StringFlag{Name: "containerd-address", Usage: "containerd's socket `SOCK` for --runtime containerd (over the config's)"},
			&cli.StringFlag{Name: "root", Value: "examples/skills", Usage: "skill root holding hello-python"},
			&cli.StringFlag{Name: "images", Usage: "image store `DIR` (default $SKILLBOX_IMAGES or /var/lib/skillbox/images)"},
			&cli.IntFlag{Name: "skills", Value: 10000, Usage: "skills to index for the registry figures"},
			&cli.IntFlag{Name: "audit-runs", Value: 10000, Usage: "runs (start+end records) to verify for the audit figure"},
			&cli.IntSliceFlag{Name: "concurrency", Value: cli.NewIntSlice(1, 2, 4, 8), Usage: "concurrent clients for the warm throughput figures"},
			&cli.IntFlag{Name: "pool", Value: 8, Usage: "warm pool size per skill (pool.per_key) in the daemon's figures"},
			&cli.StringSliceFlag{Name: "only", Usage: "run only these parts: cold, daemon, throughput, session, registry, audit, workspace, observability"},
			&cli.IntFlag{Name: "workspace-files", Value: 10000, Usage: "files in the workspace of the workspace figures"},
			&cli.StringFlag{Name: "workspace-size", Value: "1GiB", Usage: "bytes in all of the workspace of the workspace figures"},
			&cli.BoolFlag{Name: "json", Usage: "print the figures as JSON"},
		},
		Action: withoutRoot(benchAction, nil),
	}
}

func benchAction(c *cli.Context) error {
	asJSON := c.Bool("json")
	if !asJSON {
		fmt.Printf("skillbox bench: %s, %d cores\n", bench.HostDescription(), bench.Cores())
	}
	wsBytes, err := policy.ParseSize(c.String("workspace-size"))
	if err != nil {
		return exitCode(2, "--workspace-size: %v", err)
	}
	figs, err := bench.Run(c.Context, bench.Options{
		WorkspaceFiles: c.Int("workspace-files"), WorkspaceBytes: wsBytes,
		Runs: c.Int("runs"), Runtimes: c.StringSlice("runtime"), ConfigFile: c.String("config"),
		ContainerdAddress: c.String("containerd-address"), Root: c.String("root"), ImageDir: c.String("images"),
		Skills: c.Int("skills"), AuditRuns: c.Int("audit-runs"), Concurrency: c.IntSlice("concurrency"),
		Pool: c.Int("pool"), Only: c.StringSlice("only"), Version: version,
		Logger: newLogger("bench", hclog.Warn, os.Stderr),
		Report: func(f bench.Figure) {
			if !asJSON {
				fmt.Println(f)
			}
		},
	})
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(figs)
	}
	return nil
}
