package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
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

// resume finds the head of an existing log, or starts a new one.
func (l *Log) resume() error {
	files, err := listFiles(l.dir)
	if err != nil {
		return errkind.Wrap(ErrUnavailable, err)
	}
	if len(files) == 0 {
		return l.genesis(fileName(1), os.O_EXCL, nil)
	}
	last := files[len(files)-1]
	st, err := os.Stat(last.Path)
	if err != nil {
		return errkind.Wrap(ErrUnavailable, err)
	}
	f, err := l.fs.OpenFile(last.Path, os.O_RDWR, 0)
	if err != nil {
		return errkind.Wrap(ErrUnavailable, err)
	}
	l.cur, l.curN, l.curName, l.curPath = f, last.N, last.Name, last.Path
	first, lastLine, good, torn, err := fileEnds(f, st.Size())
	if err != nil {
		return errkind.Errorf(ErrUnavailable, "reading %s: %w", last.Name, err)
	}
	var dropped *Dropped
	if len(torn) > 0 {
		dropped = &Dropped{File: last.Name, Offset: good, Bytes: int64(len(torn)), SHA256: sha256Hex(torn)}
		dropped.Excerpt = base64.StdEncoding.EncodeToString(torn[:min(len(torn), 4096)])
		l.log.Warn("torn last line dropped from the audit log (a write cut short by a crash)",
			"file", last.Name, "offset", good, "bytes", len(torn), "sha256", dropped.SHA256)
	}

	if lastLine == nil {
		// No whole record in the last file: a crash while creating it.
		if len(files) == 1 {
			f.Close()
			l.cur = nil
			return l.genesis(last.Name, os.O_TRUNC, dropped)
		}
		prev := files[len(files)-2]
		pf, err := os.Open(prev.Path)
		if err != nil {
			return errkind.Wrap(ErrUnavailable, err)
		}
		pst, err := pf.Stat()
		if err != nil {
			pf.Close()
			return errkind.Wrap(ErrUnavailable, err)
		}
		pfirst, plast, _, ptorn, err := fileEnds(pf, pst.Size())
		pf.Close()
		if err != nil {
			return errkind.Errorf(ErrUnavailable, "reading %s: %w", prev.Name, err)
		}
		if len(ptorn) > 0 || plast == nil {
			return errkind.Errorf(ErrTampered, "%s does not end with a whole record but is not the last file; run 'skillbox audit verify --dir %s'", prev.Name, l.dir)
		}
		if err := l.headFrom(prev.Name, pfirst, plast); err != nil {
			return err
		}
		if err := l.truncate(0); err != nil {
			return err
		}
		items := []item{{body: l.mustBody(&Record{Event: EventRotate, Log: &LogInfo{ID: l.logID, File: last.Name, PrevFile: prev.Name, Reason: "open"}})}}
		l.curStart = l.now()
		return l.writeRecovered(items, dropped)
	}

	if err := l.headFrom(last.Name, first, lastLine); err != nil {
		return err
	}
	l.offset = good
	if dropped != nil {
		if err := l.truncate(good); err != nil {
			return err
		}
		return l.writeRecovered(nil, dropped)
	}
	return nil
}

// headFrom takes the log id from a file's first record and the head from its
// last, both of which must be intact.
func (l *Log) headFrom(name string, first, last []byte) error {
	r1, _, err := parseLine(first)
	if err != nil {
		return errkind.Errorf(ErrTampered, "%s: first record: %v; run 'skillbox audit verify --dir %s'", name, err, l.dir)
	}
	if (r1.Event != EventGenesis && r1.Event != EventRotate) || r1.Log == nil || r1.Log.ID == "" {
		return errkind.Errorf(ErrTampered, "%s: first record is %q, not %s or %s", name, r1.Event, EventGenesis, EventRotate)
	}
	rl, h, err := parseLine(last)
	if err != nil {
		return errkind.Errorf(ErrTampered, "%s: last record: %v; run 'skillbox audit verify --dir %s'", name, err, l.dir)
	}
	l.logID, l.curStart, l.seq, l.hash = r1.Log.ID, r1.Time, rl.Seq, h
	if rl.Event == EventCheckpoint {
		l.lastCP = rl.Seq // nothing new to sign since the last run's final checkpoint
	}
	return nil
}

// genesis starts a new log in file name (created with extra flag O_EXCL, or
// O_TRUNC when replacing a file that held no whole record).
func (l *Log) genesis(name string, flag int, dropped *Dropped) error {
	id := make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		return err
	}
	path := filepath.Join(l.dir, name)
	f, err := l.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|flag, 0o640)
	if err != nil {
		return errkind.Wrap(ErrUnavailable, err)
	}
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "audit-"), ".jsonl"))
	l.cur, l.curN, l.curName, l.curPath = f, n, name, path
	l.logID = hex.EncodeToString(id)
	l.seq, l.hash, l.offset, l.curStart = 0, l.logID, 0, l.now()
	items := []item{{body: l.mustBody(&Record{Event: EventGenesis, Log: &LogInfo{ID: l.logID, Version: FormatVersion, File: name}})}}
	if err := l.writeRecovered(items, dropped); err != nil {
		return err
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return errkind.Wrap(ErrUnavailable, err)
	}
	return nil
}

// writeRecovered writes items and, if bytes were dropped, the
// audit.recovered record, during Open.
func (l *Log) writeRecovered(items []item, dropped *Dropped) error {
	if dropped != nil {
		items = append(items, item{body: l.mustBody(&Record{Event: EventRecovered, Outcome: OutcomeOK,
			Log: &LogInfo{ID: l.logID, File: l.curName, Dropped: dropped}})})
		l.recovered = dropped
	}
	if len(items) == 0 {
		return nil
	}
	if err := l.commit(items); err != nil {
		return err
	}
	return nil
}

// truncate cuts the current file to size and syncs it.
func (l *Log) truncate(size int64) error {
	if err := l.cur.Truncate(size); err != nil {
		return errkind.Errorf(ErrUnavailable, "truncating %s: %w", l.curName, err)
	}
	if err := l.cur.Sync(); err != nil {
		return errkind.Wrap(ErrUnavailable, err)
	}
	l.offset = size
	return nil
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

// loop is the writer goroutine.
func (l *Log) loop() {
	defer close(l.done)
	var cpTick <-chan time.Time
	if l.opts.SigningKey != nil && l.opts.CheckpointEvery > 0 {
		t := time.NewTicker(l.opts.CheckpointEvery)
		defer t.Stop()
		cpTick = t.C
	}
	retry := time.NewTicker(l.opts.RetryEvery)
	defer retry.Stop()
	for {
		select {
		case req := <-l.reqs:
			batch := []*request{req}
		drain:
			for len(batch) < maxBatch {
				select {
				case r := <-l.reqs:
					batch = append(batch, r)
				default:
					break drain
				}
			}
			l.process(batch)
		case <-cpTick:
			if l.seq > l.lastCP && l.failed == nil {
				l.commit([]item{{cp: &Checkpoint{}}})
			}
		case <-retry.C:
			if l.failed != nil {
				l.commit(nil)
			}
		case <-l.quit:
			if l.opts.SigningKey != nil && l.seq > l.lastCP && l.failed == nil {
				l.commit([]item{{cp: &Checkpoint{}}})
			}
			return
		}
	}
}

// process writes a batch in order, answering each request.
func (l *Log) process(batch []*request) {
	items := make([]item, 0, len(batch))
	for _, r := range batch {
		if r.kind == reqCheckpoint {
			items = append(items, item{req: r, cp: &Checkpoint{}})
		} else {
			items = append(items, item{req: r, body: r.body})
		}
	}
	l.commit(items)
}

// commit writes items (after an audit.resumed record if the log had failed,
// in a new file if it is time to rotate) with one write and one fsync, and
// answers their requests. On failure nothing is left of the attempt: the
// file is cut back to the last whole record, and the log is marked failed.
func (l *Log) commit(items []item) error {
	var pre []item
	if l.failed != nil {
		if err := l.repair(); err != nil {
			return l.fail(err, items)
		}
		out := &Outage{Since: l.failedSince, Refused: l.refused, LastError: l.failed.Error()}
		pre = append(pre, item{body: l.mustBody(&Record{Event: EventResumed, Outcome: OutcomeOK, Log: &LogInfo{ID: l.logID, Outage: out}})})
	}
	if reason := l.rotateReason(); reason != "" {
		if err := l.rotate(reason); err != nil {
			return l.fail(err, items)
		}
	}
	all := append(pre, items...)
	if len(all) == 0 {
		return nil
	}
	seq, prev := l.seq, l.hash
	var buf []byte
	var cps []*Checkpoint
	for i := range all {
		it := &all[i]
		t := l.now().UTC()
		if it.cp != nil {
			*it.cp = Checkpoint{LogID: l.logID, Seq: seq, Hash: prev, Time: t}
			it.cp.sign(l.opts.SigningKey)
			it.body = l.mustBody(&Record{Event: EventCheckpoint, Checkpoint: it.cp})
			cps = append(cps, it.cp)
		}
		seq++
		line, h := assemble(seq, t, it.body, prev)
		it.res = result{seq: seq, time: t, prev: prev, hash: h}
		prev = h
		buf = append(buf, line...)
	}
	n, err := l.cur.WriteAt(buf, l.offset)
	if err == nil && n < len(buf) {
		err = io.ErrShortWrite
	}
	if err == nil {
		err = l.cur.Sync()
	}
	if err != nil {
		// Never leave half a line: cut back now, and again in repair
		// before the next write in case this fails too.
		l.cur.Truncate(l.offset)
		return l.fail(err, items)
	}
	l.offset += int64(len(buf))
	l.seq, l.hash = seq, prev
	if len(pre) > 0 {
		l.log.Info("audit log writable again", "down_since", l.failedSince, "refused", l.refused)
		l.failed, l.refused = nil, 0
	}
	l.publish()
	for i := range all {
		if all[i].req != nil {
			all[i].req.done <- all[i].res
		}
	}
	for _, cp := range cps {
		l.lastCP = cp.Seq + 1
		if err := appendCheckpointFile(l.opts.CheckpointFile, cp); err != nil {
			l.log.Warn("checkpoint written to the log but not to the checkpoints file", "file", l.opts.CheckpointFile, "error", err)
		}
	}
	return nil
}

// fail marks the log failed and answers items' requests with the error.
func (l *Log) fail(cause error, items []item) error {
	if l.failed == nil {
		l.failedSince = l.now().UTC()
		l.log.Error("audit log cannot be written; runs are refused until it can", "dir", l.dir, "error", cause)
	}
	l.failed = cause
	for _, it := range items {
		if it.req != nil {
			l.refused++
		}
	}
	err := errkind.Wrap(ErrUnavailable, cause)
	l.state.Lock()
	l.health = errkind.Errorf(ErrUnavailable, "%w (since %s, %d appends refused; retrying every %s)", cause, l.failedSince.Format(time.RFC3339), l.refused, l.opts.RetryEvery)
	l.state.Unlock()
	for _, it := range items {
		if it.req != nil {
			it.req.done <- result{err: err}
		}
	}
	return err
}

// repair reopens the current file and cuts it back to the last whole record,
// so a write that failed half way leaves nothing behind. A fresh descriptor
// also sheds any error state the old one kept.
func (l *Log) repair() error {
	f, err := l.fs.OpenFile(l.curPath, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(l.offset); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	l.cur.Close()
	l.cur = f
	return nil
}

// rotateReason says whether the current file is full ("size") or old ("age").
func (l *Log) rotateReason() string {
	switch {
	case l.opts.RotateBytes > 0 && l.offset >= l.opts.RotateBytes:
		return "size"
	case l.opts.RotateAge > 0 && l.now().Sub(l.curStart) >= l.opts.RotateAge:
		return "age"
	}
	return ""
}

// rotate starts the next file with an audit.rotate record linked to the
// current head. Until it succeeds the old file is not written to, so a
// retried rotation never forks the chain.
func (l *Log) rotate(reason string) error {
	n := l.curN + 1
	name := fileName(n)
	path := filepath.Join(l.dir, name)
	f, err := l.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	t := l.now().UTC()
	line, h := assemble(l.seq+1, t, l.mustBody(&Record{Event: EventRotate, Log: &LogInfo{ID: l.logID, File: name, PrevFile: l.curName, Reason: reason}}), l.hash)
	k, err := f.WriteAt(line, 0)
	if err == nil && k < len(line) {
		err = io.ErrShortWrite
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = l.fs.SyncDir(l.dir)
	}
	if err != nil {
		f.Close()
		l.fs.Remove(path)
		return err
	}
	l.cur.Close()
	l.cur, l.curN, l.curName, l.curPath = f, n, name, path
	l.offset, l.curStart = int64(len(line)), t
	l.seq, l.hash = l.seq+1, h
	l.log.Debug("audit log rotated", "file", name, "reason", reason, "seq", l.seq)
	return nil
}

// publish makes the head and health visible to other goroutines.
func (l *Log) publish() {
	l.state.Lock()
	l.headSeq, l.headHash = l.seq, l.hash
	if l.failed == nil {
		l.health = nil
	}
	l.state.Unlock()
}

// appendCheckpointFile adds cp as one line to path and syncs it. A torn last
// line left by a crash is cut off first so lines never run together.
func appendCheckpointFile(path string, cp *Checkpoint) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	end := st.Size()
	if end > 0 {
		nl, err := lastIndexBefore(f, end)
		if err != nil {
			return err
		}
		if nl+1 != end {
			if err := f.Truncate(nl + 1); err != nil {
				return err
			}
			end = nl + 1
		}
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(append(b, '\n'), end); err != nil {
		return err
	}
	return f.Sync()
}

// Body encoding: the record's JSON without seq, time and prev_hash, which only
// the writer knows. assemble puts them back in the same places, so the line
// is byte for byte what encoding/json makes of the whole Record.
const (
	bodyPrefix = `{"seq":0,"time":"0001-01-01T00:00:00Z",`
	bodySuffix = `,"prev_hash":""}`
)

func encodeBody(r *Record) ([]byte, error) {
	c := *r
	c.Seq, c.Time, c.PrevHash, c.Hash = 0, time.Time{}, "", ""
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&c); err != nil {
		return nil, fmt.Errorf("audit: encoding %s record: %w", r.Event, err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if !bytes.HasPrefix(b, []byte(bodyPrefix)) || !bytes.HasSuffix(b, []byte(bodySuffix)) {
		return nil, fmt.Errorf("audit: unexpected encoding of %s record", r.Event)
	}
	return oneLine(b[len(bodyPrefix) : len(b)-len(bodySuffix)])
}

// mustBody encodes the log's own records, which cannot fail to encode, with
// the log's replica.
func (l *Log) mustBody(r *Record) []byte {
	r.Replica = l.opts.Replica
	b, err := encodeBody(r)
	if err != nil {
		panic(err)
	}
	return b
}

// assemble makes the line (with "\n") for a body and returns it with its hash.
func assemble(seq uint64, t time.Time, body []byte, prev string) ([]byte, string) {
	tb, _ := t.MarshalJSON()
	line := make([]byte, 0, len(body)+len(tb)+len(prev)+suffixLen+48)
	line = append(line, `{"seq":`...)
	line = strconv.AppendUint(line, seq, 10)
	line = append(line, `,"time":`...)
	line = append(line, tb...)
	line = append(line, ',')
	line = append(line, body...)
	line = append(line, `,"prev_hash":"`...)
	line = append(line, prev...)
	line = append(line, '"', '}')
	sum := sha256.Sum256(line)
	var hb [64]byte
	hex.Encode(hb[:], sum[:])
	line = line[:len(line)-1]
	line = append(line, hashKey...)
	line = append(line, hb[:]...)
	line = append(line, '"', '}', '\n')
	return line, string(hb[:])
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
