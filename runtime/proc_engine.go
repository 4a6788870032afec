package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Timing of the stop sequence. No timing here is a guarantee the tests
// depend on; they only bound how long a stuck runtime can hold a run.
const (
	KillRetry       = 500 * time.Millisecond
	KillWait        = 10 * time.Second
	drainWait       = 5 * time.Second
	TeardownTimeout = 60 * time.Second
)

// namedLogger returns an hclog logger named name from opts, or a null logger.
func NamedLogger(l Logger, name string) Logger {
	switch lg := l.(type) {
	case nil:
		return hclog.NewNullLogger()
	case hclog.Logger:
		return lg.Named(name)
	default:
		return l
	}
}

// removeCgroupRetry retries for a while as the cgroup's last processes exit.
func removeCgroupRetry(ctx context.Context, p string) error {
	giveUp := time.After(KillWait)
	for {
		err := removeCgroup(p)
		if err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-giveUp:
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
