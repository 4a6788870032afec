package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

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
