package ocicli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/checkpoint"
	"github.com/skillbox/skillbox/runtime/oci"
)

// countingBudget refuses what passes its limits, counting what it was
// asked for.
type countingBudget struct {
	reserveMax, chargeMax int64
	reserves              int
	reserved, charged     int64
}

func (b *countingBudget) Reserve(n int64) error {
	b.reserves++
	if b.reserved+n > b.reserveMax {
		return fmt.Errorf("reserve %d: %w", n, checkpoint.ErrBudgetExceeded)
	}
	b.reserved += n
	return nil
}

func (b *countingBudget) Charge(n int64) error {
	if b.charged+n > b.chargeMax {
		return fmt.Errorf("charge %d: %w", n, checkpoint.ErrBudgetExceeded)
	}
	b.charged += n
	return nil
}

// fakeRunscSession is a session sandbox whose runsc is a script that
// logs its commands (one a line, without --root) and succeeds; its /work
// holds 64 KiB.
func fakeRunscSession(t *testing.T) (*sessionSandbox, func() string) {
	t.Helper()
	dir := t.TempDir()
	logf := filepath.Join(dir, "calls")
	bin := filepath.Join(dir, "runsc")
	script := "#!/bin/sh\nshift 2\necho \"$@\" >> " + logf + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "data"), make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &engine{name: "runsc", cli: &ociCLI{name: "runsc", binary: bin, root: filepath.Join(dir, "root")}, log: hclog.NewNullLogger()}
	s := &sessionSandbox{e: e, spec: runtime.SandboxSpec{ID: "sb1"}, b: &oci.Bundle{Workdir: work}, done: make(chan struct{})}
	calls := func() string {
		b, _ := os.ReadFile(logf)
		return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "; ")
	}
	return s, calls
}

// TestSessionCheckpointReservesBeforeFreeze: /work is reserved before
// the sandbox is frozen, so a checkpoint that cannot fit never stops it;
// one whose copy passes the budget once frozen is thawed, not destroyed;
// a Freeze's reservation is not made twice by the Checkpoint after it.
func TestSessionCheckpointReservesBeforeFreeze(t *testing.T) {
	ctx := context.Background()
	const reserveAll, chargeAll = 1 << 30, 1 << 30
	for _, tc := range []struct {
		name      string
		freeze    bool // Freeze first, then Checkpoint(leaveRunning), then Thaw
		budget    countingBudget
		wantErr   bool
		wantCalls string
		reserves  int
	}{
		{"refused at the reservation, by Checkpoint", false, countingBudget{reserveMax: 1 << 10, chargeMax: chargeAll}, true, "", 1},
		{"refused at the reservation, by Freeze", true, countingBudget{reserveMax: 1 << 10, chargeMax: chargeAll}, true, "", 1},
		{"the copy passes the budget: thawed", false, countingBudget{reserveMax: reserveAll, chargeMax: 1 << 10}, true,
			"pause sb1; checkpoint --image-path IMG --leave-running sb1; resume sb1", 1},
		{"the copy passes the budget while the caller holds it frozen", true, countingBudget{reserveMax: reserveAll, chargeMax: 1 << 10}, true,
			"pause sb1; checkpoint --image-path IMG --leave-running sb1; resume sb1", 1},
		{"frozen, checkpointed, thawed: reserved once", true, countingBudget{reserveMax: reserveAll, chargeMax: chargeAll}, false,
			"pause sb1; checkpoint --image-path IMG --leave-running sb1; resume sb1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, calls := fakeRunscSession(t)
			ck := t.TempDir()
			img, work := filepath.Join(ck, "image"), filepath.Join(ck, "work")
			if err := os.Mkdir(img, 0o700); err != nil {
				t.Fatal(err)
			}
			b := tc.budget
			var err error
			if tc.freeze {
				err = s.Freeze(ctx, &b)
				if err == nil {
					err = s.Checkpoint(ctx, img, work, true, &b)
					err = errors.Join(err, s.Thaw(ctx))
				}
			} else {
				err = s.Checkpoint(ctx, img, work, true, &b)
			}
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, checkpoint.ErrBudgetExceeded)) {
				t.Fatalf("checkpoint: %v, want a budget error: %v", err, tc.wantErr)
			}
			if got := strings.ReplaceAll(calls(), img, "IMG"); got != tc.wantCalls {
				t.Errorf("runsc saw %q, want %q", got, tc.wantCalls)
			}
			if b.reserves != tc.reserves {
				t.Errorf("/work was reserved %d times, want %d", b.reserves, tc.reserves)
			}
			select {
			case <-s.done:
				t.Errorf("the sandbox was destroyed")
			default:
			}
			if s.frozen || !s.fg.TryLock() {
				t.Errorf("the sandbox is still held frozen (frozen %v)", s.frozen)
			}
		})
	}
}
