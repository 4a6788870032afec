package ocicli

import (
	"context"
	"time"

	"github.com/skillbox/skillbox/runtime/process"
)

func (e *engine) sweep(ctx context.Context) error {
	if _, err := e.cli.lookup(); err != nil {
		return err
	}
	return e.sweeper().Sweep(ctx)
}

func (e *engine) sweeper() *process.Sweeper {
	return process.NewSweeper(e.runDir, e.log, process.SweepOps{List: e.cli.list, State: e.cli.state, Delete: e.deleteRetry})
}

// deleteRetry retries delete --force a few times. After a crash the killed
// sandbox or container init is an orphan that only the host's init can
// reap; until it does, the runtime sees it alive and its delete times out.
func (e *engine) deleteRetry(ctx context.Context, id string) error {
	var err error
	for i := 0; i < sweepDeleteTries; i++ {
		if err = e.cli.delete(ctx, id); err == nil {
			return nil
		}
		e.log.Debug("delete of leftover container failed; retrying", "id", id, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
	return err
}

const sweepDeleteTries = 5
