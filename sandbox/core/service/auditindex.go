package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// Audit reads (search, history) are served from an in-memory index of the
// log, built at the first read after start (which also verifies the chain
// once, in full) and extended on every read by what was appended since: the
// log is append-only, so each read costs the new lines plus the records it
// returns, not the whole log. The chain is verified incrementally along the
// same cursor; an approver may ask for a full verify.
//
// Memory: one idxEntry (40 bytes) per record plus 4 bytes in its uid's list:
// 300,001 records for 150,000 runs are about 13 MiB.

// Bounds of concurrent audit reads: per uid, and in total, of which the
// last auditReadReserve are kept for approvers.
const (
	auditReadsPerUID = 2
	auditReadsTotal  = 8
	auditReadReserve = 2
)

// auditReads caps concurrent audit reads per uid and in total.
type auditReads struct {
	mu    sync.Mutex
	byUID map[uint32]int
	total int
}

// acquire takes a read slot for caller or refuses with limit_exceeded.
func (a *auditReads) acquire(caller api.Peer, approver bool) (func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byUID == nil {
		a.byUID = map[uint32]int{}
	}
	limit := auditReadsTotal - auditReadReserve
	if approver {
		limit = auditReadsTotal
	}
	switch {
	case a.byUID[caller.UID] >= auditReadsPerUID:
		return nil, errkind.Errorf(errkind.LimitExceeded, "uid %d already has %d audit reads running (at most %d at once): retry when one has finished", caller.UID, a.byUID[caller.UID], auditReadsPerUID)
	case a.total >= limit:
		return nil, errkind.Errorf(errkind.LimitExceeded, "%d audit reads are running (at most %d at once): retry in a moment", a.total, limit)
	}
	a.byUID[caller.UID]++
	a.total++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.total--
		if a.byUID[caller.UID]--; a.byUID[caller.UID] <= 0 {
			delete(a.byUID, caller.UID)
		}
	}, nil
}

// idxEntry locates one record and holds the fields queries select on.
type idxEntry struct {
	off    int64
	time   int64 // UnixNano
	length uint32
	uid    uint32
	skill  int32 // interned skill, -1 none, <= -2: multi[-skill-2]
	file   uint16
	event  uint16
	peer   bool
}

// auditIndex is the index of one chain (a directory of audit-N.jsonl).
type auditIndex struct {
	dir   string
	chain string // the chain's name, for findings

	mu      sync.RWMutex
	cursor  *audit.Cursor
	files   []string
	fileIdx map[string]uint16
	entries []idxEntry
	byUID   map[uint32][]int32
	events  []string
	eventID map[string]uint16
	skills  []string
	skillID map[string]int32
	multi   [][]int32
	// hist holds, per interned skill, the run.end records that name it:
	// what SkillHistory needs, so it reads nothing from the log.
	hist map[int32][]histRun
	// noLog is set while the directory holds no records yet.
	noLog error
}

func newAuditIndex(dir, chain string) *auditIndex {
	x := &auditIndex{dir: dir, chain: chain}
	x.reset()
	return x
}

func (x *auditIndex) reset() {
	x.cursor, x.noLog = audit.NewCursor(x.dir), nil
	x.files, x.fileIdx = nil, map[string]uint16{}
	x.entries, x.byUID = nil, map[uint32][]int32{}
	x.events, x.eventID = nil, map[string]uint16{}
	x.skills, x.skillID, x.multi = nil, map[string]int32{}, nil
	x.hist = map[int32][]histRun{}
}

// histRun is one run.end record, summed up for SkillHistory.
type histRun struct {
	time     int64 // UnixNano
	dur      int64 // ms
	egA, egD int64 // egress attempts, denied
	uid      uint32
	peer     bool
	failure  string // as addRun classifies it; "" for none
}

var runEndFilter = audit.Filter{Event: audit.EventRunEnd}

// addHist keeps the summary of a run.end record for each skill it names.
func (x *auditIndex) addHist(e *audit.Entry, ent *idxEntry, ids []int32) error {
	var r struct {
		Outcome string         `json:"outcome"`
		Run     *audit.RunInfo `json:"run"`
	}
	if err := json.Unmarshal(e.Raw, &r); err != nil {
		return fmt.Errorf("%s at byte %d: not an audit record: %v", e.File, e.Offset, err)
	}
	if r.Run == nil {
		return nil
	}
	h := histRun{time: ent.time, dur: r.Run.DurationMS, uid: ent.uid, peer: ent.peer, failure: runFailure(r.Outcome, r.Run)}
	if st := r.Run.EgressStats; st != nil {
		h.egA, h.egD = int64(st.Connections+st.Denied), int64(st.Denied)
	}
	seen := map[int32]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			x.hist[id] = append(x.hist[id], h)
		}
	}
	return nil
}

// history calls fn with the run.end summaries of skill the caller may see
// in [since, until) (since zero: no bound).
func (x *auditIndex) history(approver bool, caller api.Peer, skill string, since, until time.Time, fn func(histRun) error) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	id, ok := x.skillID[skill]
	if !ok {
		return nil
	}
	for _, h := range x.hist[id] {
		if !approver && (!h.peer || h.uid != caller.UID) {
			continue
		}
		if !since.IsZero() && h.time < since.UnixNano() || !until.IsZero() && h.time >= until.UnixNano() {
			continue
		}
		if err := fn(h); err != nil {
			return err
		}
	}
	return nil
}

// refresh indexes and verifies what was appended since the last call; on a
// change only a new pass can judge (retention removed files, a file
// shrank) it starts over once.
func (x *auditIndex) refresh() error { return x.refreshCtx(context.Background()) }

// refreshCtx is refresh, given up (and the index left to be built by the
// next read) when ctx ends.
func (x *auditIndex) refreshCtx(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	add := func(e *audit.Entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return x.add(e)
	}
	err := x.cursor.Advance(add)
	if errors.Is(err, audit.ErrRebuild) {
		x.reset()
		err = x.cursor.Advance(add)
	}
	if err != nil {
		x.reset() // a half-read index is not kept
	}
	if errors.Is(err, audit.ErrNoLog) {
		x.noLog = err
		return nil
	}
	return err
}

func (x *auditIndex) add(e *audit.Entry) error {
	fi, ok := x.fileIdx[e.File]
	if !ok {
		if len(x.files) > 0xffff {
			return fmt.Errorf("more than %d audit files", 0xffff)
		}
		fi = uint16(len(x.files))
		x.files = append(x.files, e.File)
		x.fileIdx[e.File] = fi
	}
	var r struct {
		Time  time.Time `json:"time"`
		Event string    `json:"event"`
		Peer  *struct {
			UID uint32 `json:"uid"`
		} `json:"peer"`
		Skill  *audit.SkillRef  `json:"skill"`
		Skills []audit.SkillRef `json:"skills"`
	}
	if err := json.Unmarshal(e.Raw, &r); err != nil {
		return fmt.Errorf("%s at byte %d: not an audit record: %v", e.File, e.Offset, err)
	}
	ent := idxEntry{off: e.Offset, time: r.Time.UnixNano(), length: uint32(len(e.Raw)), file: fi, skill: -1}
	ev, ok := x.eventID[r.Event]
	if !ok {
		ev = uint16(len(x.events))
		x.events = append(x.events, r.Event)
		x.eventID[r.Event] = ev
	}
	ent.event = ev
	if r.Peer != nil {
		ent.peer, ent.uid = true, r.Peer.UID
	}
	var names []string
	if r.Skill != nil {
		names = append(names, r.Skill.Name)
	}
	for _, sk := range r.Skills {
		names = append(names, sk.Name)
	}
	if len(names) == 1 {
		ent.skill = x.skill(names[0])
	} else if len(names) > 1 {
		ids := make([]int32, len(names))
		for i, n := range names {
			ids[i] = x.skill(n)
		}
		ent.skill = int32(-2 - len(x.multi))
		x.multi = append(x.multi, ids)
	}
	if runEndFilter.Match(&audit.Record{Event: r.Event}) && len(names) > 0 {
		ids := make([]int32, len(names))
		for i, n := range names {
			ids[i] = x.skill(n)
		}
		if err := x.addHist(e, &ent, ids); err != nil {
			return err
		}
	}
	i := int32(len(x.entries))
	x.entries = append(x.entries, ent)
	if ent.peer {
		x.byUID[ent.uid] = append(x.byUID[ent.uid], i)
	}
	return nil
}

func (x *auditIndex) skill(name string) int32 {
	id, ok := x.skillID[name]
	if !ok {
		id = int32(len(x.skills))
		x.skills = append(x.skills, name)
		x.skillID[name] = id
	}
	return id
}

// status is the chain's verification so far, as verifyChains reports it.
func (x *auditIndex) status() ChainStatus {
	rep := x.cursor.Report()
	st := ChainStatus{Intact: true, Chains: 1, Records: rep.Records}
	if x.noLog != nil {
		st.Intact, st.Finding = false, x.noLog.Error()
	}
	if te := x.cursor.Failure(); te != nil {
		st.Intact, st.Finding = false, chainName(x.chain)+te.Error()
	}
	return st
}

// query is a search over the index: candidates are the caller's own
// records for a non-approver (or the filter's uid), else all; the filter's
// indexed fields decide the match, and records are read from the log only
// for the newest limit matches (or, when the filter needs fields the index
// lacks, for the candidates that pass the indexed ones).
func (x *auditIndex) query(ctx context.Context, approver bool, caller api.Peer, f audit.Filter, limit int) ([]*audit.Record, int, ChainStatus, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	evOK := make([]bool, len(x.events))
	evFilter := audit.Filter{Event: f.Event}
	for i, ev := range x.events {
		evOK[i] = evFilter.Match(&audit.Record{Event: ev}) && (approver || strings.HasPrefix(ev, "run."))
	}
	skill := int32(-1)
	if f.Skill != "" {
		id, ok := x.skillID[f.Skill]
		if !ok {
			return []*audit.Record{}, 0, x.status(), nil
		}
		skill = id
	}
	var cand []int32
	all := true
	switch {
	case !approver:
		cand, all = x.byUID[caller.UID], false
	case f.UID != nil:
		cand, all = x.byUID[*f.UID], false
	}
	n := len(x.entries)
	if !all {
		n = len(cand)
	}
	at := func(k int) *idxEntry {
		if all {
			return &x.entries[k]
		}
		return &x.entries[cand[k]]
	}
	pass := func(e *idxEntry) bool {
		if !evOK[e.event] {
			return false
		}
		if !approver && (!e.peer || e.uid != caller.UID) {
			return false
		}
		if f.UID != nil && (!e.peer || e.uid != *f.UID) {
			return false
		}
		if !f.Since.IsZero() && e.time < f.Since.UnixNano() {
			return false
		}
		if !f.Until.IsZero() && e.time >= f.Until.UnixNano() {
			return false
		}
		if skill >= 0 {
			if e.skill >= 0 {
				return e.skill == skill
			}
			if e.skill == -1 {
				return false
			}
			for _, s := range x.multi[-e.skill-2] {
				if s == skill {
					return true
				}
			}
			return false
		}
		return true
	}
	rd := &recordReader{dir: x.dir, files: x.files, open: map[uint16]*os.File{}}
	defer rd.close()
	full := func(r *audit.Record) bool { return f.Match(r) && visible(approver, caller, r) }
	exact := f.Replica == "" && f.SessionID == ""
	var out []*audit.Record
	matched := 0
	if exact {
		// Count from the index; read only the newest limit.
		var keep []int
		for k := n - 1; k >= 0; k-- {
			if pass(at(k)) {
				matched++
				if len(keep) < limit {
					keep = append(keep, k)
				}
			}
		}
		for i := len(keep) - 1; i >= 0; i-- {
			r, err := rd.read(at(keep[i]))
			if err != nil {
				return nil, 0, ChainStatus{}, err
			}
			if !full(r) { // the index and the record disagree: trust the record
				matched--
				continue
			}
			out = append(out, r)
		}
	} else {
		for k := 0; k < n; k++ {
			if k%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return nil, 0, ChainStatus{}, err
				}
			}
			e := at(k)
			if !pass(e) {
				continue
			}
			r, err := rd.read(e)
			if err != nil {
				return nil, 0, ChainStatus{}, err
			}
			if !full(r) {
				continue
			}
			matched++
			if len(out) == limit {
				out = out[1:]
			}
			out = append(out, r)
		}
	}
	if out == nil {
		out = []*audit.Record{}
	}
	return out, matched, x.status(), nil
}

// recordReader reads records back from their files by offset.
type recordReader struct {
	dir   string
	files []string
	open  map[uint16]*os.File
	buf   []byte
}

func (rd *recordReader) read(e *idxEntry) (*audit.Record, error) {
	f := rd.open[e.file]
	if f == nil {
		var err error
		if f, err = os.Open(filepath.Join(rd.dir, rd.files[e.file])); err != nil {
			return nil, err
		}
		rd.open[e.file] = f
	}
	if cap(rd.buf) < int(e.length) {
		rd.buf = make([]byte, e.length)
	}
	b := rd.buf[:e.length]
	if _, err := f.ReadAt(b, e.off); err != nil {
		return nil, fmt.Errorf("%s at byte %d: %w", rd.files[e.file], e.off, err)
	}
	var r audit.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s at byte %d: not an audit record: %v", rd.files[e.file], e.off, err)
	}
	return &r, nil
}

func (rd *recordReader) close() {
	for _, f := range rd.open {
		f.Close()
	}
}

// auditIndexFor returns the index of dir's chain, or nil when dir holds
// several chains (replicas), which are read by a merged scan instead.
func (s *Service) auditIndexFor(dir string) (*auditIndex, error) {
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	if s.auditIdx != nil && s.auditIdx.root == dir {
		return s.auditIdx.x, nil
	}
	chains, err := audit.Chains(dir)
	if err != nil {
		return nil, err
	}
	if len(chains) != 1 {
		return nil, nil
	}
	s.auditIdx = &rootIndex{root: dir, x: newAuditIndex(chains[0].Dir, chains[0].Name)}
	return s.auditIdx.x, nil
}

type rootIndex struct {
	root string
	x    *auditIndex
}

// WarmAuditIndex builds the audit index and verifies the chain once, so
// that the first search after the daemon starts costs what it returns
// instead of a pass over the whole log. A search that arrives meanwhile
// waits for the pass and then reads from the index. With no audit log,
// or several chains (replicas, read by a merged scan), it does nothing;
// when ctx ends first, the next read builds the index.
func (s *Service) WarmAuditIndex(ctx context.Context) error {
	if s.cfg.Daemon.AuditDir == "" {
		return nil
	}
	x, err := s.auditIndexFor(s.cfg.Daemon.AuditDir)
	if errors.Is(err, audit.ErrNoLog) || (err == nil && x == nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("indexing the audit log: %w", err)
	}
	if err := x.refreshCtx(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("indexing the audit log: %w", err)
	}
	return nil
}
