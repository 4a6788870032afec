package audit

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/skillbox/skillbox/runtime/errkind"
)

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
