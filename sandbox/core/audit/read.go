package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Entry is one record as read back: where it is, its exact bytes and its
// decoded form. Reading does not verify; use Verify for that.
type Entry struct {
	// Chain is the name of the chain's subdirectory ("" for the chain in
	// the directory read itself, see Chains); File is relative to it.
	Chain  string
	File   string
	Offset int64
	Raw    []byte // the line without "\n"; valid only during the callback
	Record *Record

	chainIdx int
}

// ErrStop, returned by a callback, ends Scan, Read or Tail early; they then
// return nil.
var ErrStop = errors.New("audit: stop")

// Scan calls fn for every complete record in dir, in log order. An
// incomplete last line (a write in progress) is skipped. When dir holds
// several chains (replicas, see Chains) their records are merged by time,
// ties broken by replica and then seq; each chain's own order is kept.
func Scan(dir string, fn func(*Entry) error) error {
	chains, err := chainsIn(dir)
	if err != nil {
		return err
	}
	return scanMerged(chains, fn)
}

// scanFile calls fn for each complete record of f from offset off and
// returns the offset after the last one.
func scanFile(f logFile, off int64, fn func(*Entry) error) (int64, error) {
	return forEachLine(f.Path, off, func(line []byte, at int64, complete bool) error {
		if !complete {
			return nil
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("%s at byte %d: not an audit record: %v", f.Name, at, err)
		}
		return fn(&Entry{File: f.Name, Offset: at, Raw: line, Record: &r})
	})
}

// Read calls fn for every record in dir, in log order (merged by time over
// several chains, as Scan).
func Read(dir string, fn func(*Record) error) error {
	return Scan(dir, func(e *Entry) error { return fn(e.Record) })
}

// Filter selects records for query, tail and export. Zero fields match all.
type Filter struct {
	// Replica matches the replica that wrote the record.
	Replica   string
	SessionID string
	// Skill matches the record's skill or any of its skills by name.
	Skill string
	// Event is an exact event, a family ("run" matches run.start and
	// run.end), a glob ("confirmation.*"), or several of these separated by
	// commas.
	Event string
	UID   *uint32
	// Since is inclusive, Until exclusive.
	Since, Until time.Time
}

// Match reports whether r passes the filter.
func (f *Filter) Match(r *Record) bool {
	if f.Replica != "" && r.Replica != f.Replica {
		return false
	}
	if f.SessionID != "" && r.SessionID != f.SessionID {
		return false
	}
	if f.Skill != "" && !slices.Contains(r.SkillNames(), f.Skill) {
		return false
	}
	if f.Event != "" && !matchEvent(f.Event, r.Event) {
		return false
	}
	if f.UID != nil && (r.Peer == nil || r.Peer.UID != *f.UID) {
		return false
	}
	if !f.Since.IsZero() && r.Time.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !r.Time.Before(f.Until) {
		return false
	}
	return true
}

func matchEvent(pats, ev string) bool {
	for _, p := range strings.Split(pats, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
		case p == ev, strings.HasPrefix(ev, p+"."):
			return true
		case strings.ContainsAny(p, "*?["):
			if ok, _ := path.Match(p, ev); ok {
				return true
			}
		}
	}
	return false
}

// TailOptions shape Tail.
type TailOptions struct {
	// N is how many of the last records to show first (0: none).
	N int
	// Follow keeps reading new records as they are written, across
	// rotation, until the context ends.
	Follow bool
	// Poll is how often to look for new records (default 250ms).
	Poll time.Duration
}

// Tail calls fn for the last N records of dir and then, with Follow, for each
// new record until ctx ends (returning nil). It follows rotation: once a newer
// file exists and the current one has been read to its end, it moves on. It
// follows one chain: a dir holding several (replicas) is refused with their
// names, so the caller can pick one.
func Tail(ctx context.Context, dir string, opts TailOptions, fn func(*Entry) error) error {
	if opts.Poll <= 0 {
		opts.Poll = 250 * time.Millisecond
	}
	chains, err := Chains(dir)
	if err != nil {
		return err
	}
	switch {
	case len(chains) == 1:
		dir = chains[0].Dir
	case len(chains) > 1:
		return fmt.Errorf("%s holds %d chains (%s), one per replica; tail one of them: --dir %s", dir, len(chains), chainNames(chains), ReplicaDir(dir, chains[len(chains)-1].Label()))
	}
	err = tail(ctx, dir, opts, fn)
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

func tail(ctx context.Context, dir string, opts TailOptions, fn func(*Entry) error) error {
	files, err := listFiles(dir)
	if err != nil {
		return err
	}
	if len(files) == 0 && !opts.Follow {
		return fmt.Errorf("%w in %s", ErrNoLog, dir)
	}
	cur, off := -1, int64(0) // cur: number of the file being followed
	if len(files) > 0 {
		// Find where the last N records start, counting back.
		start, skip, need := len(files)-1, 0, opts.N
		for i := len(files) - 1; i >= 0 && need > 0; i-- {
			c, err := countLines(files[i].Path)
			if err != nil {
				return err
			}
			start = i
			if c >= need {
				skip, need = c-need, 0
			} else {
				need -= c
			}
		}
		if opts.N <= 0 {
			start, skip = len(files)-1, -1 // just position at the end
		}
		for i := start; i < len(files); i++ {
			n := 0
			end, err := scanFile(files[i], 0, func(e *Entry) error {
				n++
				if i == start && (skip < 0 || n <= skip) {
					return nil
				}
				return fn(e)
			})
			if err != nil {
				return err
			}
			cur, off = files[i].N, end
		}
	}
	if !opts.Follow {
		return nil
	}
	for {
		if cur >= 0 {
			f := logFile{N: cur, Name: fileName(cur), Path: filepath.Join(dir, fileName(cur))}
			if st, err := os.Stat(f.Path); err == nil && st.Size() < off {
				off = st.Size() // cut back by the writer after a failed write
			}
			end, err := scanFile(f, off, fn)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			progressed := end > off
			off = end
			if progressed {
				continue
			}
		}
		files, err := listFiles(dir)
		if err != nil {
			return err
		}
		if next := nextFile(files, cur); next != nil {
			if cur >= 0 {
				// The writer finished cur before creating next; read what
				// is left of it once more before moving on.
				f := logFile{N: cur, Name: fileName(cur), Path: filepath.Join(dir, fileName(cur))}
				if _, err := scanFile(f, off, fn); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
			cur, off = next.N, 0
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(opts.Poll):
		}
	}
}

func nextFile(files []logFile, cur int) *logFile {
	for i := range files {
		if files[i].N > cur {
			return &files[i]
		}
	}
	return nil
}

// countLines counts the complete lines of a file.
func countLines(p string) (int, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	n := 0
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// Export writes the records of dir that pass f to w as plain JSON Lines for
// a SIEM: one flat object per record (see Flatten), with its replica and seq
// as written. Several chains (replicas) are merged by time as in Scan. It
// returns how many.
func Export(w io.Writer, dir string, f Filter) (int, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	err := Scan(dir, func(e *Entry) error {
		if !f.Match(e.Record) {
			return nil
		}
		m, err := Flatten(e.Raw)
		if err != nil {
			return fmt.Errorf("%s at byte %d: %v", filepath.Join(e.Chain, e.File), e.Offset, err)
		}
		n++
		return enc.Encode(m)
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, err
}

// DecodeObject reads a record line as a generic object (nil for "null"),
// its numbers kept exactly as written, for exports that reshape records.
func DecodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// Flatten turns a record line into one level of keys joined with "." (peer
// becomes peer.uid, peer.pid, …; run.limits.memory_bytes). Arrays stay
// arrays; objects inside them are flattened the same way. Numbers are kept
// exactly as written.
func Flatten(raw []byte) (map[string]any, error) {
	m, err := DecodeObject(raw)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(m)*2)
	flattenInto(out, "", m)
	return out, nil
}

func flattenInto(out map[string]any, prefix string, v any) {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 && prefix != "" {
			out[prefix] = t
			return
		}
		for k, x := range t {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flattenInto(out, key, x)
		}
	case []any:
		arr := make([]any, len(t))
		for i, x := range t {
			if mx, ok := x.(map[string]any); ok {
				o := map[string]any{}
				flattenInto(o, "", mx)
				arr[i] = o
			} else {
				arr[i] = x
			}
		}
		out[prefix] = arr
	default:
		out[prefix] = t
	}
}
