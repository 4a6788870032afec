package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy/replicaname"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Sentinel errors.
var (
	// ErrUnavailable: the log cannot be written now. Runs must be refused
	// until Healthy returns nil again.
	ErrUnavailable = errkind.New(errkind.Unavailable, "audit log unavailable")
	// ErrTampered: the log's contents are not what the writer wrote. Verify
	// returns a *TamperError wrapping it; Open returns it when the tail of
	// the log is not a valid record (other than a torn last line).
	ErrTampered = errors.New("audit log tampered")
	// ErrLocked: another process holds the log directory's writer lock.
	ErrLocked = errors.New("audit log locked")
	// ErrClosed: Append after Close. It wraps ErrUnavailable, so a closed
	// log also refuses runs.
	ErrClosed = errkind.Errorf(ErrUnavailable, "closed")
)

// Defaults for Options left zero.
const (
	DefaultRotateBytes     = 64 << 20
	DefaultCheckpointEvery = 5 * time.Minute
	DefaultRetryEvery      = 2 * time.Second
	// DefaultDir is where the daemon and the CLI look by default.
	DefaultDir = "/var/log/skillbox"
)

// maxBatch bounds how many waiting appends share one write and fsync.
const maxBatch = 512

// Options tune a Log. The zero value is usable.
type Options struct {
	// Replica names the daemon replica that writes the log; it goes into
	// every record (see replicaname.Check). "" writes records without one,
	// as logs did before replicas.
	Replica string
	// RotateBytes starts a new file once the current one has reached this
	// size (default 64 MiB; negative: never).
	RotateBytes int64
	// RotateAge starts a new file once the current one is this old (0: never).
	RotateAge time.Duration
	// SigningKey, if set, signs checkpoints (see LoadPrivateKey, GenerateKey).
	SigningKey ed25519.PrivateKey
	// CheckpointEvery is how often a checkpoint is written when records were
	// added since the last one (default 5 minutes; negative: only on Close
	// and Checkpoint). Needs SigningKey.
	CheckpointEvery time.Duration
	// CheckpointFile is where checkpoints are also appended, one JSON object
	// per line (default DIR/checkpoints.jsonl). Ship it off the machine.
	CheckpointFile string
	// RetryEvery is how often a failed log tries to write again on its own
	// (default 2 seconds).
	RetryEvery time.Duration
	// Logger receives warnings (recovery, outages); it is named "audit".
	Logger hclog.Logger
}

func (o Options) withDefaults(dir string) Options {
	if o.RotateBytes == 0 {
		o.RotateBytes = DefaultRotateBytes
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = DefaultCheckpointEvery
	}
	if o.CheckpointFile == "" {
		o.CheckpointFile = filepath.Join(dir, checkpointsName)
	}
	if o.RetryEvery <= 0 {
		o.RetryEvery = DefaultRetryEvery
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if n := o.Logger.Name(); n != "audit" && !strings.HasSuffix(n, ".audit") {
		o.Logger = o.Logger.Named("audit")
	}
	return o
}

// Log is an open audit log: one writer goroutine owns the files; Append
// hands it records and waits until they are on disk. Safe for concurrent use.
type Log struct {
	dir  string
	opts Options
	log  hclog.Logger
	fs   fileSystem
	now  func() time.Time
	lock *os.File

	reqs chan *request
	quit chan struct{}
	done chan struct{}

	mu     sync.RWMutex // closed; held shared while sending on reqs
	closed bool

	state     sync.Mutex // the fields readers see
	headSeq   uint64
	headHash  string
	health    error
	recovered *Dropped

	// Owned by the writer goroutine (and by Open before it starts).
	logID       string
	cur         file
	curN        int
	curName     string
	curPath     string
	curStart    time.Time
	offset      int64
	seq         uint64
	hash        string
	failed      error
	failedSince time.Time
	refused     int
	lastCP      uint64
}

type reqKind int

const (
	reqAppend reqKind = iota
	reqCheckpoint
)

type request struct {
	kind reqKind
	body []byte
	done chan result
}

type result struct {
	seq        uint64
	time       time.Time
	prev, hash string
	err        error
}

// item is one record to write: a caller's body, or one the log makes itself.
type item struct {
	body []byte
	req  *request
	cp   *Checkpoint // non-nil: a checkpoint, signed at assembly
	res  result
}

// Open opens the log in dir for writing, creating dir and the log if needed,
// and takes the directory's writer lock (ErrLocked if another process has
// it). A torn last line — a write cut short by a crash — is cut off, logged
// and recorded in an audit.recovered record (see Recovered); anything else
// wrong with the tail fails Open with ErrTampered, so a daemon does not write
// on after damage nobody has looked at.
func Open(dir string, opts Options) (*Log, error) {
	return openLog(dir, opts, osFS{}, time.Now)
}

func openLog(dir string, opts Options, fsys fileSystem, now func() time.Time) (*Log, error) {
	opts = opts.withDefaults(dir)
	if opts.Replica != "" {
		if err := replicaname.Check(opts.Replica); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, errkind.Wrap(ErrUnavailable, err)
	}
	lock, err := lockDir(dir, opts.Replica)
	if err != nil {
		return nil, err
	}
	l := &Log{
		dir: dir, opts: opts, log: opts.Logger, fs: fsys, now: now, lock: lock,
		reqs: make(chan *request), quit: make(chan struct{}), done: make(chan struct{}),
	}
	if err := l.resume(); err != nil {
		if l.cur != nil {
			l.cur.Close()
		}
		unlockDir(lock)
		return nil, err
	}
	l.publish()
	l.log.Info("audit log open", "dir", dir, "log_id", l.logID, "file", l.curName, "seq", l.seq)
	go l.loop()
	return l, nil
}

// Append writes r to the log and returns once it is on disk (fsynced). It
// fills r.Seq, r.Time, r.PrevHash and r.Hash. Callers must not use the
// audit.* events. If the log cannot be written the error wraps
// ErrUnavailable, and so does Healthy until a write works again. ctx bounds
// the wait; if it ends after the record was handed over, the record may
// still be written.
func (l *Log) Append(ctx context.Context, r *Record) error {
	if r == nil || r.Event == "" {
		return errors.New("audit: record has no event")
	}
	if strings.HasPrefix(r.Event, "audit.") {
		return fmt.Errorf("audit: event %q is reserved for the log itself", r.Event)
	}
	c := *r
	c.Replica = l.opts.Replica
	body, err := encodeBody(&c)
	if err != nil {
		return err
	}
	res, err := l.send(ctx, &request{kind: reqAppend, body: body, done: make(chan result, 1)})
	if err != nil {
		return err
	}
	r.Seq, r.Time, r.Replica, r.PrevHash, r.Hash = res.seq, res.time, l.opts.Replica, res.prev, res.hash
	return nil
}

// Checkpoint writes a signed checkpoint of the head now (see Options).
func (l *Log) Checkpoint(ctx context.Context) error {
	if l.opts.SigningKey == nil {
		return errors.New("audit: no signing key configured for checkpoints")
	}
	_, err := l.send(ctx, &request{kind: reqCheckpoint, done: make(chan result, 1)})
	return err
}

func (l *Log) send(ctx context.Context, req *request) (result, error) {
	if err := ctx.Err(); err != nil {
		return result{}, fmt.Errorf("audit: %w", err)
	}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return result{}, ErrClosed
	}
	select {
	case l.reqs <- req:
		l.mu.RUnlock()
	case <-ctx.Done():
		l.mu.RUnlock()
		return result{}, fmt.Errorf("audit: record not written: %w", ctx.Err())
	}
	select {
	case res := <-req.done:
		return res, res.err
	case <-ctx.Done():
		return result{}, fmt.Errorf("audit: gave up waiting for the write (%w); the record may still be written", ctx.Err())
	}
}

// Healthy returns nil when the log is writable, else why not (wrapping
// ErrUnavailable). The daemon checks it before every run.
func (l *Log) Healthy() error {
	l.state.Lock()
	defer l.state.Unlock()
	return l.health
}

// Head returns the sequence number and hash of the last record written.
func (l *Log) Head() (seq uint64, hash string) {
	l.state.Lock()
	defer l.state.Unlock()
	return l.headSeq, l.headHash
}

// LogID returns the log's random id (the genesis anchor).
func (l *Log) LogID() string { return l.logID }

// Replica returns the replica name the log writes into its records.
func (l *Log) Replica() string { return l.opts.Replica }

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Recovered returns the torn tail Open dropped, or nil.
func (l *Log) Recovered() *Dropped {
	l.state.Lock()
	defer l.state.Unlock()
	return l.recovered
}

// Close writes a last checkpoint (with a signing key), closes the files and
// releases the writer lock. Appends after Close fail with ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.quit)
	<-l.done
	l.state.Lock()
	l.health = ErrClosed
	l.state.Unlock()
	var err error
	if l.cur != nil {
		err = l.cur.Close()
	}
	unlockDir(l.lock)
	return err
}
