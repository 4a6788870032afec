package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// fileLock is an flock(2) lock on a file that is never removed: removing a
// lock file while another process waits on its old inode would let two
// holders in at once, so lock files stay in <dir>/locks for good.
type fileLock struct{ f *os.File }

// lockPollInterval is how often a waiter retries a busy lock. flock has no
// timeout or cancellation, so waiting is a non-blocking retry loop that
// honours ctx.
const lockPollInterval = 100 * time.Millisecond

// acquireLock takes an exclusive lock on path, waiting (and saying so once in
// the log) while another process holds it, until ctx is done.
func acquireLock(ctx context.Context, path string, logger hclog.Logger) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &fileLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !logged {
			logger.Info("waiting for another skillbox process", "lock", path)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(lockPollInterval):
		}
	}
}

// tryLock takes the lock only if it is free at once; ok is false when busy.
func tryLock(path string) (l *fileLock, ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return &fileLock{f: f}, true, nil
}

// release drops the lock (closing the descriptor releases the flock).
func (l *fileLock) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
