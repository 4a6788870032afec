package audit

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Reason classifies why Verify rejected a log.
type Reason string

// Reasons Verify gives.
const (
	ReasonChanged      Reason = "changed record"                  // bytes differ from what was hashed
	ReasonMissing      Reason = "missing record"                  // a seq never appears
	ReasonReordered    Reason = "reordered record"                // a seq appears out of place
	ReasonDuplicate    Reason = "duplicated record"               // a seq appears twice
	ReasonBadLink      Reason = "bad hash link"                   // prev_hash is not the previous record's hash
	ReasonBadSignature Reason = "bad signature"                   // a checkpoint's signature or key
	ReasonTruncated    Reason = "truncated after checkpoint"      // the log ends before a checkpoint's seq
	ReasonCheckpoint   Reason = "does not match checkpoint"       // a record's hash differs from a signed checkpoint's
	ReasonMalformed    Reason = "malformed log"                   // structure: not JSON, misplaced audit.* records, …
	ReasonLogReplaced  Reason = "log id differs from checkpoints" // a different log than the checkpoints vouch for
)

// TamperError is Verify's finding: the first record that is not as written.
type TamperError struct {
	Seq    uint64 `json:"seq"` // the first bad seq
	Reason Reason `json:"reason"`
	File   string `json:"file,omitempty"` // where it was found (may be empty for checkpoint findings)
	Line   int    `json:"line,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func (e *TamperError) Error() string { return fmt.Sprintf("seq %d: %s", e.Seq, e.Finding()) }

// Finding is what is wrong at Seq: the reason, where, and the detail.
func (e *TamperError) Finding() string {
	s := string(e.Reason)
	if e.File != "" {
		s += fmt.Sprintf(" (%s line %d)", e.File, e.Line)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap makes errors.Is(err, ErrTampered) true.
func (e *TamperError) Unwrap() error { return ErrTampered }

// VerifyOptions select what Verify checks besides the chain.
type VerifyOptions struct {
	// PublicKey checks the signatures of checkpoints in the log and in
	// Checkpoints. Without it, in-log checkpoints are checked for structure
	// only.
	PublicKey ed25519.PublicKey
	// Checkpoints is a checkpoints file kept apart from the log; each of its
	// checkpoints must be matched by the log (needs PublicKey).
	Checkpoints string
	// Partial accepts a log whose earliest files were removed (retention):
	// the chain is then checked from the first file's audit.rotate record.
	Partial bool
}

// Report summarizes a verified log (or the part before a failure).
type Report struct {
	Dir       string    `json:"dir"`
	LogID     string    `json:"log_id"`
	Files     []string  `json:"files"`
	Records   uint64    `json:"records"`
	FirstSeq  uint64    `json:"first_seq"`
	LastSeq   uint64    `json:"last_seq"`
	FirstTime time.Time `json:"first_time"`
	LastTime  time.Time `json:"last_time"`
	Head      string    `json:"head"` // hash of the last record
	// Replicas are the replica names the chain's records carry, in order
	// of first appearance: one for a replica's chain, none for a log
	// written before replicas; a second means the writer was renamed.
	Replicas []string `json:"replicas,omitempty"`
	// Partial is set when the chain starts at a rotate record (VerifyOptions.Partial).
	Partial bool `json:"partial,omitempty"`
	// LogCheckpoints counts audit.checkpoint records; SignaturesChecked says
	// whether their signatures were verified.
	LogCheckpoints    int  `json:"log_checkpoints"`
	SignaturesChecked bool `json:"signatures_checked"`
	// FileCheckpoints counts checkpoints from VerifyOptions.Checkpoints that
	// the log matched; SkippedCheckpoints those before a Partial log's start.
	FileCheckpoints    int `json:"file_checkpoints"`
	SkippedCheckpoints int `json:"skipped_checkpoints,omitempty"`
	// Recoveries lists torn tails the writer dropped on open, with the seq
	// of the audit.recovered record that reports each.
	Recoveries []Recovery `json:"recoveries,omitempty"`
	// Outages counts audit.resumed records (times the log could not be
	// written for a while; runs were refused meanwhile).
	Outages int `json:"outages,omitempty"`
	// TornTail is the length of an incomplete last line: a write in progress
	// or cut by a crash (the writer drops and records it on its next Open).
	TornTail int `json:"torn_tail,omitempty"`
}

// Recovery is one audit.recovered record.
type Recovery struct {
	Seq uint64 `json:"seq"`
	Dropped
}

// pos locates a line for failure reports.
type pos struct {
	file int
	line int
}

// Verify checks the log in dir: every record's hash, the chain of prev_hash
// links from the genesis anchor, seq continuity, the structure of rotations
// and, with a key, checkpoint signatures; with a checkpoints file, that the
// log still reaches each checkpoint with the same hash. It returns a report
// and, when the log is not intact, a *TamperError (wrapping ErrTampered) for
// the first bad seq. Other errors are I/O problems or ErrNoLog.
func Verify(dir string, opts VerifyOptions) (*Report, error) {
	ext, err := loadCheckpoints(opts)
	if err != nil {
		return &Report{Dir: dir, SignaturesChecked: opts.PublicKey != nil}, err
	}
	return verifyChain(dir, opts, ext, false)
}

// loadCheckpoints reads and checks the signatures of the checkpoints file.
func loadCheckpoints(opts VerifyOptions) ([]Checkpoint, error) {
	if opts.Checkpoints == "" {
		return nil, nil
	}
	if opts.PublicKey == nil {
		return nil, errors.New("audit: checking a checkpoints file needs the public key")
	}
	ext, err := ReadCheckpoints(opts.Checkpoints)
	if err != nil {
		return nil, err
	}
	for _, c := range ext {
		if err := c.Verify(opts.PublicKey); err != nil {
			return nil, &TamperError{Seq: c.Seq, Reason: ReasonBadSignature, File: opts.Checkpoints, Detail: "checkpoint: " + err.Error()}
		}
	}
	slices.SortFunc(ext, func(a, b Checkpoint) int { return cmpUint(a.Seq, b.Seq) })
	return ext, nil
}

// verifyChain is Verify of the chain in dir against the checkpoints ext.
// With ownOnly, checkpoints of other log ids are someone else's (VerifyAll
// over several chains) and skipped; else they mean the log was replaced.
func verifyChain(dir string, opts VerifyOptions, ext []Checkpoint, ownOnly bool) (*Report, error) {
	files, err := listFiles(dir)
	if err != nil {
		return nil, err
	}
	rep := &Report{Dir: dir, SignaturesChecked: opts.PublicKey != nil}
	for _, f := range files {
		rep.Files = append(rep.Files, f.Name)
	}
	need := map[uint64]string{}
	for _, c := range ext {
		need[c.Seq] = ""
	}
	if len(files) == 0 {
		if len(ext) > 0 {
			return rep, &TamperError{Seq: 1, Reason: ReasonTruncated, Detail: fmt.Sprintf("no log files in %s, but a checkpoint vouches for seq %d", dir, ext[len(ext)-1].Seq)}
		}
		if cs, _ := Chains(dir); len(cs) > 0 {
			return rep, fmt.Errorf("%w in %s itself: it holds the chains of replicas %s; verify them all with VerifyAll ('skillbox audit verify --dir %s')", ErrNoLog, dir, chainNames(cs), dir)
		}
		return rep, fmt.Errorf("%w in %s", ErrNoLog, dir)
	}

	v := &verifier{opts: opts, rep: rep, files: files, need: need}
	if err := v.walk(); err != nil {
		return rep, err
	}

	// The log must reach every external checkpoint, with the same hash.
	for _, c := range ext {
		if c.LogID != rep.LogID {
			if ownOnly {
				continue
			}
			return rep, &TamperError{Seq: rep.FirstSeq, Reason: ReasonLogReplaced,
				Detail: fmt.Sprintf("the log's id is %s but checkpoint seq %d is for log %s", rep.LogID, c.Seq, c.LogID)}
		}
		if rep.Partial && c.Seq < rep.FirstSeq {
			rep.SkippedCheckpoints++
			continue
		}
		if c.Seq > rep.LastSeq {
			return rep, &TamperError{Seq: rep.LastSeq + 1, Reason: ReasonTruncated,
				Detail: fmt.Sprintf("a checkpoint signed at %s vouches for seq %d, but the log ends at seq %d", c.Time.UTC().Format(time.RFC3339), c.Seq, rep.LastSeq)}
		}
		if h := need[c.Seq]; h != c.Hash {
			return rep, &TamperError{Seq: c.Seq, Reason: ReasonCheckpoint,
				Detail: fmt.Sprintf("record hash %s, checkpoint signed at %s says %s: records up to seq %d were rewritten", short(h), c.Time.UTC().Format(time.RFC3339), short(c.Hash), c.Seq)}
		}
		rep.FileCheckpoints++
	}
	return rep, nil
}

type verifier struct {
	opts  VerifyOptions
	rep   *Report
	files []logFile
	need  map[uint64]string

	started bool
	expSeq  uint64
	prev    string
}

func (v *verifier) walk() error {
	for fi, f := range v.files {
		lines, err := parseFile(f.Path, func(p *parsedLine) error {
			if !p.complete {
				if fi == len(v.files)-1 {
					v.rep.TornTail = p.size
					return nil
				}
				return v.fail(ReasonMalformed, fi, p.n, v.expSeq, "incomplete line in a file that is not the last")
			}
			return v.record(p, fi)
		})
		if err != nil {
			return err
		}
		if lines == 0 && fi < len(v.files)-1 {
			return v.fail(ReasonMissing, fi, 0, v.expSeq, f.Name+" is empty but is not the last file")
		}
	}
	if !v.started && v.rep.TornTail == 0 {
		return errkind.Errorf(ErrNoLog, "%s holds no records", v.rep.Dir)
	}
	return nil
}

// parsedLine is one line, hashed and decoded.
type parsedLine struct {
	n        int // line number in the file, from 1
	size     int
	complete bool
	rec      *chainRec
	hash     string
	err      error
}

// parseFile hashes and decodes the lines of a file on all CPUs and calls fn
// for each in order, stopping at fn's first error. It returns the number of
// lines. Hashing and decoding are independent per line; only the chain check
// in fn is sequential.
func parseFile(path string, fn func(*parsedLine) error) (int, error) {
	type batch struct {
		raw  [][]byte
		out  []parsedLine
		done chan struct{}
	}
	workers := max(1, runtime.GOMAXPROCS(0))
	work := make(chan *batch, workers)
	ordered := make(chan *batch, 2*workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				for i := range b.out {
					p := &b.out[i]
					if p.complete {
						p.rec, p.hash, p.err = parseChain(b.raw[i])
					}
				}
				b.raw = nil
				close(b.done)
			}
		}()
	}
	var readErr error
	go func() {
		defer close(ordered)
		defer close(work)
		const size = 128
		n := 0
		b := &batch{done: make(chan struct{})}
		send := func() bool {
			select {
			case ordered <- b:
			case <-stop:
				return false
			}
			work <- b
			b = &batch{done: make(chan struct{})}
			return true
		}
		_, readErr = forEachLine(path, 0, func(line []byte, _ int64, complete bool) error {
			n++
			b.raw = append(b.raw, append([]byte(nil), line...))
			b.out = append(b.out, parsedLine{n: n, size: len(line), complete: complete})
			if len(b.out) == size && !send() {
				return errStop
			}
			return nil
		})
		if len(b.out) > 0 {
			send()
		}
	}()
	lines := 0
	var err error
	for b := range ordered {
		<-b.done
		if err != nil {
			continue // drain
		}
		for i := range b.out {
			lines = b.out[i].n
			if err = fn(&b.out[i]); err != nil {
				close(stop)
				break
			}
		}
	}
	wg.Wait()
	if err != nil {
		return lines, err
	}
	if readErr != nil && !errors.Is(readErr, errStop) {
		return lines, readErr
	}
	return lines, nil
}

func (v *verifier) fail(r Reason, fi, line int, seq uint64, detail string) *TamperError {
	e := &TamperError{Seq: seq, Reason: r, Line: line, Detail: detail}
	if fi >= 0 && fi < len(v.files) {
		e.File = v.files[fi].Name
	}
	return e
}

func (v *verifier) record(p *parsedLine, fi int) error {
	exp := v.expSeq
	if !v.started {
		exp = 1
	}
	lineNo, rec, hash, err := p.n, p.rec, p.hash, p.err
	if err != nil {
		seq := exp
		if errors.Is(err, errHashMismatch) {
			return v.fail(ReasonChanged, fi, lineNo, seq, err.Error())
		}
		return v.fail(ReasonChanged, fi, lineNo, seq, "not a valid record: "+err.Error())
	}
	firstInFile := lineNo == 1
	if !v.started {
		switch {
		case rec.Event == EventGenesis && fi == 0 && firstInFile:
			if rec.Seq != 1 || rec.Log == nil || rec.Log.ID == "" || rec.PrevHash != rec.Log.ID {
				return v.fail(ReasonMalformed, fi, lineNo, 1, "genesis record must have seq 1 and prev_hash equal to its log id")
			}
		case rec.Event == EventRotate && firstInFile && v.opts.Partial && rec.Log != nil:
			v.rep.Partial = true
		case rec.Event == EventRotate && firstInFile && rec.Log != nil:
			return v.fail(ReasonMissing, fi, lineNo, 1, fmt.Sprintf("the log starts at seq %d in %s: earlier files were removed (use --partial if that was retention)", rec.Seq, v.files[fi].Name))
		default:
			return v.fail(ReasonMalformed, fi, lineNo, 1, fmt.Sprintf("the log starts with %q, not %s", rec.Event, EventGenesis))
		}
		v.started = true
		v.rep.LogID = rec.Log.ID
		v.rep.FirstSeq, v.rep.FirstTime = rec.Seq, rec.Time
		v.expSeq, v.prev = rec.Seq, rec.PrevHash
		exp = rec.Seq
	}
	if rec.Seq != exp {
		return v.classify(rec, fi, lineNo, exp)
	}
	if rec.PrevHash != v.prev {
		return v.fail(ReasonBadLink, fi, lineNo, rec.Seq, fmt.Sprintf("prev_hash %s is not the hash of seq %d (%s)", short(rec.PrevHash), exp-1, short(v.prev)))
	}
	switch rec.Event {
	case EventGenesis:
		if rec.Seq != 1 {
			return v.fail(ReasonMalformed, fi, lineNo, rec.Seq, "a genesis record in the middle of the log")
		}
	case EventRotate:
		if !firstInFile {
			return v.fail(ReasonMalformed, fi, lineNo, rec.Seq, "a rotate record that does not begin a file")
		}
		if rec.Log == nil || rec.Log.ID != v.rep.LogID {
			return v.fail(ReasonMalformed, fi, lineNo, rec.Seq, "rotate record for another log id")
		}
	case EventCheckpoint:
		c := rec.Checkpoint
		if c == nil || c.LogID != v.rep.LogID || c.Seq != rec.Seq-1 || c.Hash != v.prev {
			return v.fail(ReasonMalformed, fi, lineNo, rec.Seq, "checkpoint does not describe the record before it")
		}
		if v.opts.PublicKey != nil {
			if err := c.Verify(v.opts.PublicKey); err != nil {
				return v.fail(ReasonBadSignature, fi, lineNo, rec.Seq, err.Error())
			}
		}
		v.rep.LogCheckpoints++
	case EventRecovered:
		if rec.Log != nil && rec.Log.Dropped != nil {
			v.rep.Recoveries = append(v.rep.Recoveries, Recovery{Seq: rec.Seq, Dropped: *rec.Log.Dropped})
		}
	case EventResumed:
		v.rep.Outages++
	}
	if firstInFile && fi > 0 && rec.Event != EventRotate {
		return v.fail(ReasonMalformed, fi, lineNo, rec.Seq, fmt.Sprintf("%s does not begin with a rotate record", v.files[fi].Name))
	}
	if _, ok := v.need[rec.Seq]; ok {
		v.need[rec.Seq] = hash
	}
	if rec.Replica != "" && !slices.Contains(v.rep.Replicas, rec.Replica) {
		v.rep.Replicas = append(v.rep.Replicas, rec.Replica)
	}
	v.rep.Records++
	v.rep.LastSeq, v.rep.LastTime, v.rep.Head = rec.Seq, rec.Time, hash
	v.expSeq, v.prev = rec.Seq+1, hash
	return nil
}

// classify explains a seq that is not the expected one, looking through the
// whole log (this runs once, on failure).
func (v *verifier) classify(rec *chainRec, fi, lineNo int, exp uint64) error {
	here := pos{fi, lineNo}
	where := v.find(exp)
	if rec.Seq > exp {
		for _, p := range where {
			if p.file > here.file || p.file == here.file && p.line > here.line {
				return v.fail(ReasonReordered, fi, lineNo, exp, fmt.Sprintf("seq %d appears after seq %d", exp, rec.Seq))
			}
		}
		detail := fmt.Sprintf("expected seq %d, found %d", exp, rec.Seq)
		if rec.Seq > exp+1 {
			detail = fmt.Sprintf("seqs %d-%d are missing", exp, rec.Seq-1)
		}
		if lineNo == 1 && fi > 0 && v.files[fi].N != v.files[fi-1].N+1 {
			detail += fmt.Sprintf(" (no file between %s and %s)", v.files[fi-1].Name, v.files[fi].Name)
		}
		return v.fail(ReasonMissing, fi, lineNo, exp, detail)
	}
	// rec.Seq < exp: seen before (a copy) or moved back.
	for _, p := range v.find(rec.Seq) {
		if p.file < here.file || p.file == here.file && p.line < here.line {
			if rec.Hash == v.hashAt(p) {
				return v.fail(ReasonDuplicate, fi, lineNo, rec.Seq, fmt.Sprintf("seq %d appears again after seq %d", rec.Seq, exp-1))
			}
		}
	}
	return v.fail(ReasonReordered, fi, lineNo, rec.Seq, fmt.Sprintf("seq %d appears after seq %d", rec.Seq, exp-1))
}

// find returns where records with seq are, reading only their seq.
func (v *verifier) find(seq uint64) []pos {
	var out []pos
	for fi, f := range v.files {
		n := 0
		forEachLine(f.Path, 0, func(line []byte, _ int64, complete bool) error {
			n++
			var s struct {
				Seq uint64 `json:"seq"`
			}
			if complete && json.Unmarshal(line, &s) == nil && s.Seq == seq {
				out = append(out, pos{fi, n})
			}
			return nil
		})
	}
	return out
}

// hashAt returns the hash member of the record at p.
func (v *verifier) hashAt(p pos) string {
	var h string
	n := 0
	forEachLine(v.files[p.file].Path, 0, func(line []byte, _ int64, _ bool) error {
		n++
		if n == p.line {
			var s struct {
				Hash string `json:"hash"`
			}
			json.Unmarshal(line, &s)
			h = s.Hash
			return errStop
		}
		return nil
	})
	return h
}

var errStop = errors.New("stop")

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	if h == "" {
		return "(none)"
	}
	return h
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
