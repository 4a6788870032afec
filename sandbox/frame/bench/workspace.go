package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
)

// workspace times cold runs of hello.py in a workspace of WorkspaceFiles
// files (WorkspaceBytes in all) that name one input, against the same run
// without a workspace, the two alternating through one engine; then runs
// given the whole tree.
func (b *bench) workspace(ctx context.Context, rt string, n int) error {
	files, total := b.o.WorkspaceFiles, b.o.WorkspaceBytes
	if files <= 0 {
		files = 10000
	}
	if total <= 0 {
		total = 1 << 30
	}
	dir, err := os.MkdirTemp("", "skillbox-bench-ws-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeTree(dir, files, total/int64(files)); err != nil {
		return err
	}
	eng, sk, err := b.engine(rt, b.log)
	if err != nil {
		return err
	}
	// The whole tree must fit the run's /work and memory.
	cfg := eng.Config()
	cfg.Limits.WorkdirBytes = max(cfg.Limits.WorkdirBytes, 2*total)
	cfg.Limits.MemoryBytes = max(cfg.Limits.MemoryBytes, 2*total)
	cfg.Limits.Timeout = max(cfg.Limits.Timeout, 5*time.Minute)
	plain := runner.RunRequest{Skill: sk, Script: "scripts/hello.py"}
	one := plain
	one.Workspace = &runner.WorkspaceRequest{Dir: dir, Kind: api.WorkspaceHost, Inputs: []string{"d000/f00000.bin"}}
	run := func(req runner.RunRequest) (time.Duration, error) {
		t := time.Now()
		out, err := eng.Run(ctx, req)
		if err != nil {
			return 0, err
		}
		if out.Result.ExitCode != 0 {
			return 0, fmt.Errorf("hello.py exited %d: %s", out.Result.ExitCode, out.Result.Stderr)
		}
		return time.Since(t), nil
	}
	if _, err := run(plain); err != nil { // image and caches
		return fmt.Errorf("workspace bench: %w", err)
	}
	var without, with []time.Duration
	for i := 0; i < n; i++ {
		d, err := run(plain)
		if err != nil {
			return fmt.Errorf("workspace bench: %w", err)
		}
		without = append(without, d)
		if d, err = run(one); err != nil {
			return fmt.Errorf("workspace bench, one input: %w", err)
		}
		with = append(with, d)
	}
	base := ms(median(without))
	size := policy.FormatSize(total)
	b.add(Figure{Name: fmt.Sprintf("cold run, %s", rt), Value: base, Unit: "ms", Note: fmt.Sprintf("no workspace, n=%d", n)})
	b.add(Figure{Name: fmt.Sprintf("cold run, workspace of %d files naming one", files), Value: ms(median(with)), Unit: "ms",
		Baseline: "the run without a workspace", Ratio: ms(median(with)) / base,
		Note: fmt.Sprintf("%+.1f ms, %s tree, n=%d", ms(median(with))-base, size, n)})
	whole := plain
	whole.Workspace = &runner.WorkspaceRequest{Dir: dir, Kind: api.WorkspaceHost}
	var ws []time.Duration
	for i := 0; i < min(n, 3); i++ {
		d, err := run(whole)
		if err != nil {
			return fmt.Errorf("workspace bench, whole tree: %w", err)
		}
		ws = append(ws, d)
	}
	b.add(Figure{Name: fmt.Sprintf("cold run given the whole %d-file workspace", files), Value: ms(median(ws)), Unit: "ms",
		Baseline: "the run without a workspace", Ratio: ms(median(ws)) / base, Note: fmt.Sprintf("%s copied in, n=%d", size, len(ws))})
	return nil
}

// writeTree fills dir with files of size bytes each, 100 to a directory.
func writeTree(dir string, files int, size int64) error {
	data := []byte(strings.Repeat("skillbox workspace bench\n", int(size/25)+1))[:size]
	for i := 0; i < files; i++ {
		p := filepath.Join(dir, fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%05d.bin", i))
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
