package audit

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrRebuild, from Cursor.Advance, means the files changed in a way only a
// pass from the start can judge: a file shrank below what was verified, or
// files were removed or appeared before the one being read (retention, or
// someone else). Start over with a new Cursor.
var ErrRebuild = errors.New("audit: the log's files changed under the cursor; verify it again from the start")

// Cursor verifies one chain incrementally: it remembers where it stopped
// (file, offset, seq and hash of the last record) and each Advance checks
// only the lines appended since, following rotation into newer files. What
// was verified before is not read again, so a change made behind the cursor
// is found only by a full Verify; a change at or after it is found by the
// next Advance. A file rewritten in place without growing (or a finished
// file changed at all) makes Advance return ErrRebuild. A Cursor's first Advance verifies the whole chain (as Verify
// with Partial). It is not safe for concurrent use.
type Cursor struct {
	dir     string
	v       *verifier
	firstN  int   // the first file's number when the cursor started
	cur     int   // index in v.files of the file being read, -1 before any
	off     int64 // offset in it past the last verified line
	lineNo  int   // lines verified in it
	failure *TamperError
	// stamps are the files' states when last read: a file that changed
	// without growing (or a finished one that changed at all) was
	// rewritten behind the cursor, and the chain is verified again.
	stamps []fileStamp
}

type fileStamp struct {
	size  int64
	mtime int64
	ino   uint64
}

func stampOf(st os.FileInfo) fileStamp {
	s := fileStamp{size: st.Size(), mtime: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
	}
	return s
}

// NewCursor returns a cursor at the start of the chain in dir.
func NewCursor(dir string) *Cursor {
	return &Cursor{dir: dir, cur: -1, firstN: -1,
		v: &verifier{opts: VerifyOptions{Partial: true}, rep: &Report{Dir: dir}, need: map[uint64]string{}}}
}

// Report is the verification so far: records, first and last seq, head.
func (c *Cursor) Report() *Report { return c.v.rep }

// Failure is the first tamper finding, sticky once found (nil while intact).
func (c *Cursor) Failure() *TamperError { return c.failure }

// Position is where the next Advance starts: the file, the offset in it and
// the seq and hash of the last verified record.
func (c *Cursor) Position() (file string, off int64, seq uint64, hash string) {
	if c.cur >= 0 {
		file = c.v.files[c.cur].Name
	}
	return file, c.off, c.v.rep.LastSeq, c.v.rep.Head
}

// Advance verifies the complete lines appended since the last call and
// calls fn with each verified record, in order: Raw (valid only during
// fn), File and Offset; Record is nil. An incomplete last line (a write in progress) is left for the next
// call. After a tamper finding it still reads and hands on the records
// but checks nothing more (see Failure). ErrRebuild means start again with a new Cursor.
func (c *Cursor) Advance(fn func(*Entry) error) error {
	files, err := listFiles(c.dir)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		if c.cur >= 0 {
			return ErrRebuild
		}
		return fmt.Errorf("%w in %s", ErrNoLog, c.dir)
	}
	if c.firstN < 0 {
		c.firstN = files[0].N
	} else if files[0].N != c.firstN {
		return ErrRebuild
	}
	// files must extend what was seen, in the same order.
	for i := range c.v.files {
		if i >= len(files) || files[i].N != c.v.files[i].N {
			return ErrRebuild
		}
	}
	c.v.files = files
	c.v.rep.Files = c.v.rep.Files[:0]
	for _, f := range files {
		c.v.rep.Files = append(c.v.rep.Files, f.Name)
	}
	for i, old := range c.stamps {
		st, err := os.Stat(files[i].Path)
		if err != nil {
			return ErrRebuild
		}
		now := stampOf(st)
		if now.ino != old.ino || now.size < old.size || now.size == old.size && now.mtime != old.mtime || i < c.cur && now != old {
			return ErrRebuild
		}
	}
	start := max(c.cur, 0)
	for fi := start; fi < len(files); fi++ {
		if fi != c.cur {
			if c.cur >= 0 && c.lineNo == 0 && c.failure == nil {
				c.failure = c.v.fail(ReasonMissing, c.cur, 0, c.v.expSeq, files[c.cur].Name+" is empty but is not the last file")
			}
			c.cur, c.off, c.lineNo = fi, 0, 0
		}
		st, err := os.Stat(files[fi].Path)
		if err != nil || st.Size() < c.off {
			return ErrRebuild
		}
		if fi < len(c.stamps) {
			c.stamps[fi] = stampOf(st)
		} else {
			c.stamps = append(c.stamps, stampOf(st))
		}
		last := fi == len(files)-1
		end, err := forEachLine(files[fi].Path, c.off, func(line []byte, at int64, complete bool) error {
			if !complete {
				if last {
					c.v.rep.TornTail = len(line)
					return nil
				}
				if c.failure == nil {
					c.failure = c.v.fail(ReasonMalformed, fi, c.lineNo+1, c.v.expSeq, "incomplete line in a file that is not the last")
				}
				return nil
			}
			c.v.rep.TornTail = 0
			p := &parsedLine{n: c.lineNo + 1, size: len(line), complete: true}
			p.rec, p.hash, p.err = parseChain(line)
			if c.failure == nil {
				// After a finding, records are still read (and indexed, as
				// Read would) but no longer checked.
				var te *TamperError
				if err := c.v.record(p, fi); errors.As(err, &te) {
					c.failure = te
				} else if err != nil {
					return err
				}
			}
			c.lineNo++
			c.off = at + int64(len(line)) + 1
			// Record is left nil: decoding it in full is most of the cost,
			// and an index needs only a few fields of Raw.
			return fn(&Entry{File: files[fi].Name, Offset: at, Raw: line})
		})
		if errors.Is(err, os.ErrNotExist) {
			return ErrRebuild
		}
		if err != nil {
			return err
		}
		c.off = end
	}
	if !c.v.started && c.v.rep.TornTail == 0 {
		return fmt.Errorf("%w: %s holds no records", ErrNoLog, c.dir)
	}
	return nil
}
