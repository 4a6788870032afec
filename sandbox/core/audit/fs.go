package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// file is what the writer needs of an open log file. It is an interface so
// tests can inject write, sync and truncate failures without root.
type file interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Truncate(size int64) error
	Close() error
}

// fileSystem is what the writer needs of the directory.
type fileSystem interface {
	OpenFile(name string, flag int, perm os.FileMode) (file, error)
	Remove(name string) error
	SyncDir(dir string) error
}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Remove(name string) error { return os.Remove(name) }

// SyncDir fsyncs a directory so a file created in it survives a crash.
func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Names of the files in a log directory.
const (
	lockName        = "audit.lock"
	checkpointsName = "checkpoints.jsonl"
)

var fileRE = regexp.MustCompile(`^audit-([0-9]{6,})\.jsonl$`)

// fileName is the name of the n-th log file.
func fileName(n int) string { return fmt.Sprintf("audit-%06d.jsonl", n) }

// logFile is one audit-N.jsonl in a directory.
type logFile struct {
	N    int
	Name string
	Path string
}

// ErrNoLog means a directory holds no audit files.
var ErrNoLog = errors.New("no audit log")

// listFiles returns dir's log files in order. A missing directory is an
// empty list.
func listFiles(dir string) ([]logFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []logFile
	for _, e := range ents {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		out = append(out, logFile{N: n, Name: e.Name(), Path: filepath.Join(dir, e.Name())})
	}
	slices.SortFunc(out, func(a, b logFile) int { return a.N - b.N })
	return out, nil
}

// lockDir takes the single-writer lock of dir: an exclusive, non-blocking
// flock on audit.lock, which then holds the writer's pid, host and replica
// for the message a second writer gets. The kernel drops the lock when the
// process dies, so a crash never leaves a stale lock. Replicas sharing a
// volume each lock their own directory, so two daemons started with one
// replica name are refused here instead of forking a chain.
func lockDir(dir, replica string) (*os.File, error) {
	p := filepath.Join(dir, lockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, errkind.Errorf(ErrUnavailable, "lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(p)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(b))
			if holder == "" {
				holder = "pid unknown"
			} else if !strings.Contains(holder, " ") {
				holder = "pid " + holder // written before the lock named host and replica
			}
			if replica != "" {
				return nil, errkind.Errorf(ErrLocked, "%s is being written by another daemon (%s): two daemons must not share replica name %q; give each its own daemon.replica, or stop the other", dir, holder, replica)
			}
			return nil, errkind.Errorf(ErrLocked, "%s is being written by another process (%s); stop it or use another audit dir", dir, holder)
		}
		return nil, errkind.Errorf(ErrUnavailable, "locking %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(lockHolder(replica)+"\n"), 0)
	}
	return f, nil
}

// lockHolder describes this process for audit.lock: "pid N host H", and the
// replica if it has one.
func lockHolder(replica string) string {
	s := "pid " + strconv.Itoa(os.Getpid())
	if h, err := os.Hostname(); err == nil && h != "" {
		s += " host " + strconv.QuoteToGraphic(h)
	}
	if replica != "" {
		s += " replica " + replica
	}
	return s
}

func unlockDir(f *os.File) {
	if f == nil {
		return
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}
