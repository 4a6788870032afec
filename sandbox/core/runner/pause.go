package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/checkpoint"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// Pause, resume and fork of session sandboxes. A paused sandbox is a
// checkpoint (runtime/checkpoint): gVisor's image of its memory and
// processes, a copy of its /work, and skillbox's manifest, which carries
// what it takes to make the sandbox again (Owner). The next run of the
// session restores it, after the manifest is checked against what the
// restore would be (the runsc build, the image's current digest, the
// spec and supervisor); a checkpoint that does not match is refused with
// the reason, and only sessions.resume with fresh: true discards it. A
// fork restores a checkpoint into a sandbox of a new session, with its
// own copy of /work. Every checkpoint, restore and fork is audited with
// the checkpoint's digest.

// Owner keys of a checkpoint's manifest.
const (
	ownerBox        = "box"
	ownerRootFS     = "rootfs"
	ownerImageName  = "image_name"
	ownerImageRef   = "image"
	ownerLimits     = "limits"
	ownerLayers     = "layers"
	ownerSkills     = "skills"
	ownerBackground = "background"
)

// checkpoints opens the checkpoint store on first use.
func (m *SessionSandboxes) checkpoints() (*checkpoint.Store, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.store != nil {
		return m.store, nil
	}
	if m.o.Checkpoints == "" {
		return nil, errkind.Errorf(errkind.Unavailable, "this process keeps no session checkpoints (no checkpoint dir)")
	}
	c := m.o.Config
	st, err := checkpoint.OpenLimits(m.o.Checkpoints, checkpoint.Limits{Total: c.CheckpointBudget, PerSession: c.CheckpointBudgetPerSession,
		PerUID: c.CheckpointBudgetPerUID, DiskPercent: c.CheckpointDiskPercent, MinFree: m.o.MinFree})
	if err != nil {
		return nil, errkind.Wrap(errkind.Unavailable, err)
	}
	m.store = st
	return st, nil
}

// backgroundMeta is a background run as a checkpoint keeps it.
type backgroundMeta struct {
	Run    runtime.BackgroundRun `json:"run"`
	Skill  string                `json:"skill"`
	Script string                `json:"script"`
	Start  *audit.Record         `json:"start,omitempty"`
}

// PauseInfo is one sandbox put into a checkpoint.
type PauseInfo struct {
	Sandbox    string
	Checkpoint string
	Digest     string
	Bytes      int64
	Duration   time.Duration
}

// takeCheckpoint checkpoints the box's live sandbox into a new committed
// checkpoint. The sandbox is frozen (when the runtime can, see
// runtime.Freezer) from before runsc writes its image until the
// checkpoint is committed: one that fails at any step, the store's
// budget included, thaws it, so it runs on as before, and what it wrote
// is removed. With leaveRunning (a fork of a live session) the sandbox is
// thawed after a success too; without, it goes once its checkpoint is
// kept. A sandbox that could not be thawed is gone (sb.Done()).
func (m *SessionSandboxes) takeCheckpoint(ctx context.Context, b *sessionBox, sb runtime.SessionSandbox, leaveRunning bool) (_ *checkpoint.Checkpoint, _ time.Duration, err error) {
	cp, ok := sb.(runtime.Checkpointer)
	if !ok {
		return nil, 0, errkind.Errorf(errkind.Unavailable, "this runtime cannot checkpoint session sandboxes")
	}
	st, err := m.checkpoints()
	if err != nil {
		return nil, 0, err
	}
	id, err := cp.Identity(ctx)
	if err != nil {
		return nil, 0, err
	}
	runs, _ := sb.Runs(ctx)
	owner, err := m.ownerOf(b, runs)
	if err != nil {
		return nil, 0, err
	}
	pend, err := st.BeginFor(checkpoint.Account{Session: b.key.session, UID: b.uid, HasUID: b.hasUID})
	if err != nil {
		return nil, 0, errkind.Wrap(errkind.Unavailable, err)
	}
	defer func() {
		if aerr := pend.Abort(); aerr != nil { // nothing after a Commit
			m.log.Error("a failed checkpoint could not be removed", "sandbox", b.id, "error", aerr)
		}
		if err != nil && errors.Is(err, checkpoint.ErrBudgetExceeded) && !errors.Is(err, errkind.LimitExceeded) {
			// Refused by a budget (reserving /work, charging the image or
			// a write of the copy): the caller's to change.
			err = errkind.Wrap(errkind.LimitExceeded, err)
		}
	}()
	fz, _ := sb.(runtime.Freezer)
	began := time.Now()
	if fz != nil {
		// /work is reserved before the sandbox is frozen: one that cannot
		// fit is refused without being stopped.
		if err := fz.Freeze(ctx, pend); err != nil {
			return nil, 0, err
		}
		defer func() {
			if err != nil || leaveRunning {
				err = errors.Join(err, fz.Thaw(ctx))
			}
		}()
	}
	if err := cp.Checkpoint(ctx, pend.ImageDir(), pend.WorkDir(), leaveRunning || fz != nil, pend); err != nil {
		return nil, 0, err
	}
	took := time.Since(began)
	skills := map[string]string{}
	m.mu.Lock()
	for n, ps := range b.skills {
		skills[n] = ps.digest
	}
	m.mu.Unlock()
	man := checkpoint.Manifest{Session: b.key.session, RunscVersion: id.RuntimeVersion, Platform: id.Platform, Network: id.Network,
		Image: b.spec.Image.Name, ImageDigest: b.spec.Image.Digest, SpecDigest: id.SpecDigest, SkillDigests: skills, Owner: owner}
	ck, err := pend.Commit(man)
	if err != nil {
		kind := errkind.Unavailable
		if errors.Is(err, checkpoint.ErrBudgetExceeded) {
			kind = errkind.LimitExceeded
		}
		return nil, 0, errkind.Wrap(kind, err)
	}
	if fz != nil && !leaveRunning {
		// Kept: the frozen sandbox goes.
		if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
			m.log.Warn("teardown of a paused session sandbox failed", "sandbox", b.id, "error", derr)
		}
	}
	return ck, took, nil
}

// withContext puts context (format, args) before err's message, keeping
// its kind.
func withContext(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if ke, ok := err.(*errkind.Error); ok {
		return errkind.Errorf(ke.Kind, "%s: %w", msg, ke.Err)
	}
	return fmt.Errorf("%s: %w", msg, err)
}

// sandboxGone says whether a sandbox is down (a failed checkpoint may
// have taken it down).
func sandboxGone(sb runtime.SessionSandbox) bool {
	select {
	case <-sb.Done():
		return true
	default:
		return false
	}
}

// Outcomes a failed checkpoint audits as the detail "left".
const (
	leftRunning = "running" // the sandbox runs on as before
	leftClosed  = "closed"  // it went down, and all it had was removed
)

// lose ends box b after a failed checkpoint (what: "pause", "fork") took
// its sandbox down: what is left of it goes (its sandbox with run dir,
// mounts and runtime state, its skills dir, its background runs), audited,
// and the session's next run is told why. The caller holds b.life.
func (m *SessionSandboxes) lose(ctx context.Context, b *sessionBox, sb runtime.SessionSandbox, what string, cause error) {
	why := fmt.Sprintf("its %s failed and took it down", what)
	m.mu.Lock()
	if b.sb == sb {
		b.sb = nil
	}
	if m.boxes[b.key] == b {
		delete(m.boxes, b.key)
	}
	m.lost[b.key.session] = fmt.Sprintf("session sandbox %s was closed: its %s failed (%v) and took it down; its processes and /work are gone, and the session's next run starts a new sandbox", b.id, what, cause)
	m.mu.Unlock()
	err := sb.Destroy(context.WithoutCancel(ctx))
	_ = os.RemoveAll(b.skillsDir)
	m.endRuns(func(_ runKey, br *backgroundRun) bool { return br.box == b }, why)
	rec := &audit.Record{Event: audit.EventSessionSandbox, SessionID: b.key.session, Outcome: "destroyed",
		Detail: map[string]string{"sandbox": b.id, "why": why}}
	if err != nil {
		rec.Outcome, rec.Error = audit.OutcomeError, err.Error()
	}
	_ = m.journal.Record(context.WithoutCancel(ctx), rec)
	m.log.Warn("session sandbox closed after a failed "+what, "session", b.key.session, "sandbox", b.id, "cause", cause, "teardown_error", err)
}

// ownerOf is what a checkpoint of b keeps to make it again.
func (m *SessionSandboxes) ownerOf(b *sessionBox, runs []runtime.BackgroundRun) (map[string]string, error) {
	lim, err := json.Marshal(b.spec.Limits)
	if err != nil {
		return nil, err
	}
	img, err := json.Marshal(b.spec.Image)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	skills, err := json.Marshal(placedMap(b.skills))
	var metas []backgroundMeta
	for _, r := range runs {
		meta := backgroundMeta{Run: r}
		if br := m.runs[runKey{b.key.session, r.ID}]; br != nil {
			meta.Skill, meta.Script, meta.Start = br.skillName(), br.plan.script, br.start
		}
		metas = append(metas, meta)
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	bg, err := json.Marshal(metas)
	if err != nil {
		return nil, err
	}
	layers := ""
	if b.spec.Session != nil {
		layers = b.spec.Session.Layers
	}
	return map[string]string{ownerBox: b.id, ownerRootFS: b.rootfs, ownerImageName: b.key.image, ownerImageRef: string(img),
		ownerLimits: string(lim), ownerLayers: layers, ownerSkills: string(skills), ownerBackground: string(bg)}, nil
}

func placedMap(p map[string]placedSkill) map[string][2]string {
	out := make(map[string][2]string, len(p))
	for n, ps := range p {
		out[n] = [2]string{ps.root, ps.digest}
	}
	return out
}

// pauseBox puts a live box into a checkpoint; its sandbox is gone after.
func (m *SessionSandboxes) pauseBox(ctx context.Context, b *sessionBox, why string) (*PauseInfo, error) {
	b.life.Lock()
	defer b.life.Unlock()
	m.mu.Lock()
	sb := b.sb
	m.mu.Unlock()
	if sb == nil {
		return nil, nil // paused already
	}
	ck, took, err := m.takeCheckpoint(ctx, b, sb, false)
	rec := &audit.Record{Event: audit.EventSessionCheckpoint, SessionID: b.key.session, Outcome: audit.OutcomeOK,
		Detail: map[string]string{"sandbox": b.id, "why": why}}
	if err != nil {
		// Never half-paused: running as before, or gone with all it had.
		rec.Outcome, rec.Error, rec.Detail["left"] = audit.OutcomeError, err.Error(), leftRunning
		if sandboxGone(sb) {
			rec.Detail["left"] = leftClosed
		}
		_ = m.journal.Record(context.WithoutCancel(ctx), rec)
		if rec.Detail["left"] == leftClosed {
			m.lose(ctx, b, sb, "pause", err)
			return nil, withContext(err, "session sandbox %s was not paused and is closed (its processes and /work are gone; the session's next run starts a new one)", b.id)
		}
		m.mu.Lock()
		b.lastUsed = time.Now() // the idle pause tries again after another idle timeout, not at once
		m.mu.Unlock()
		return nil, withContext(err, "session sandbox %s was not paused and runs on as before", b.id)
	}
	man := ck.Manifest()
	if man.DiskBytes > 0 {
		// What it takes on disk: a file of several names counts once.
		man.TotalBytes = man.DiskBytes
	}
	rec.Detail["checkpoint"], rec.Detail["digest"] = ck.ID(), ck.Digest()
	rec.Detail["bytes"], rec.Detail["duration_ms"] = fmt.Sprint(man.TotalBytes), fmt.Sprint(took.Milliseconds())
	_ = m.journal.Record(context.WithoutCancel(ctx), rec)
	m.mu.Lock()
	b.sb, b.ckpt = nil, ck.ID()
	m.mu.Unlock()
	m.log.Info("session sandbox paused", "session", b.key.session, "sandbox", b.id, "checkpoint", ck.ID(), "bytes", man.TotalBytes, "took", took)
	return &PauseInfo{Sandbox: b.id, Checkpoint: ck.ID(), Digest: ck.Digest(), Bytes: man.TotalBytes, Duration: took}, nil
}

// restoreInto loads checkpoint ck (checked against what a restore would
// be, with the image's current digest cur when known) and restores it
// into a new sandbox for box b.
func (m *SessionSandboxes) restoreInto(ctx context.Context, b *sessionBox, ckID string, cur runtime.ImageRef) (runtime.SessionSandbox, *checkpoint.Checkpoint, error) {
	rs, ok := m.o.Backend.(runtime.SessionRestorer)
	if !ok {
		return nil, nil, errkind.Errorf(errkind.Unavailable, "this runtime cannot restore session sandboxes")
	}
	st, err := m.checkpoints()
	if err != nil {
		return nil, nil, err
	}
	ck, err := st.Load(ckID)
	if err != nil {
		return nil, nil, errkind.Wrap(errkind.Unavailable, err)
	}
	man := ck.Manifest()
	spec := b.spec
	id, err := rs.SessionIdentity(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	want := checkpoint.Expect{RunscVersion: id.RuntimeVersion, Platform: id.Platform, Network: id.Network,
		ImageDigest: man.ImageDigest, SpecDigest: id.SpecDigest, SkillDigests: man.SkillDigests}
	if cur.Digest != "" {
		want.ImageDigest = cur.Digest
	}
	if err := ck.Verify(want); err != nil {
		var me *checkpoint.MismatchError
		if errors.As(err, &me) {
			me.Fix = "sessions.resume with fresh: true discards it, and the session's next run starts a new sandbox (its processes and memory are lost; its workspace is kept)"
		}
		return nil, nil, errkind.Wrap(errkind.Unavailable, err)
	}
	var metas []backgroundMeta
	_ = json.Unmarshal([]byte(man.Owner[ownerBackground]), &metas)
	bg := make([]runtime.BackgroundRun, 0, len(metas))
	for _, mt := range metas {
		bg = append(bg, mt.Run)
	}
	sb, err := rs.RestoreSession(ctx, spec, ck.ImageDir(), ck.WorkDir(), bg)
	if err != nil {
		return nil, nil, err
	}
	// The runs the checkpoint holds are followed on, in the box's session.
	m.adoptRuns(b, metas)
	return sb, ck, nil
}

// adoptRuns follows the background runs a checkpoint holds as runs of
// box b's session (those it follows already keep their records).
func (m *SessionSandboxes) adoptRuns(b *sessionBox, metas []backgroundMeta) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mt := range metas {
		rk := runKey{b.key.session, mt.Run.ID}
		if br := m.runs[rk]; br != nil {
			br.box = b
			continue
		}
		br := &backgroundRun{session: b.key.session, box: b, skill: mt.Skill, run: mt.Run, done: make(chan struct{}),
			plan: &Plan{runID: mt.Run.ID, script: mt.Script, origin: Origin{SessionID: b.key.session}}}
		if mt.Start == nil {
			br.start = &audit.Record{Event: audit.EventRunStart, SessionID: b.key.session, Run: &audit.RunInfo{RunID: mt.Run.ID, Script: mt.Script, Background: true}}
		} else {
			st := *mt.Start
			st.SessionID = b.key.session
			br.start = &st
		}
		m.runs[rk] = br
	}
}

// resumeBox restores a paused box (a no-op for a live one); its
// checkpoint is removed once restored.
func (m *SessionSandboxes) resumeBox(ctx context.Context, b *sessionBox, cur runtime.ImageRef) error {
	m.mu.Lock()
	paused := b.sb == nil && b.ckpt != ""
	m.mu.Unlock()
	if !paused {
		return nil
	}
	b.life.Lock()
	defer b.life.Unlock()
	m.mu.Lock()
	ckID := b.ckpt
	paused = b.sb == nil && ckID != ""
	m.mu.Unlock()
	if !paused {
		return nil
	}
	began := time.Now()
	sb, ck, err := m.restoreInto(ctx, b, ckID, cur)
	rec := &audit.Record{Event: audit.EventSessionRestore, SessionID: b.key.session, Outcome: audit.OutcomeOK,
		Detail: map[string]string{"sandbox": b.id, "checkpoint": ckID}}
	if err != nil {
		rec.Outcome, rec.Error = audit.OutcomeError, err.Error()
		_ = m.journal.Record(context.WithoutCancel(ctx), rec)
		return err
	}
	rec.Detail["digest"], rec.Detail["duration_ms"] = ck.Digest(), fmt.Sprint(time.Since(began).Milliseconds())
	_ = m.journal.Record(context.WithoutCancel(ctx), rec)
	m.mu.Lock()
	b.sb, b.ckpt, b.lastUsed = sb, "", time.Now()
	m.mu.Unlock()
	if st, err := m.checkpoints(); err == nil {
		_ = st.Remove(ckID)
	}
	m.log.Info("session sandbox resumed", "session", b.key.session, "sandbox", b.id, "checkpoint", ckID, "took", time.Since(began))
	return nil
}

// Pause checkpoints every live sandbox of the session.
func (m *SessionSandboxes) Pause(ctx context.Context, session string) ([]PauseInfo, error) {
	if err := m.available(); err != nil {
		return nil, err
	}
	var out []PauseInfo
	for _, b := range m.boxesOf(session) {
		m.mu.Lock()
		busy := b.active > 0
		m.mu.Unlock()
		if busy {
			return out, errkind.Errorf(errkind.Unavailable, "session %s has a run under way in sandbox %s: pause it when the run has ended", session, b.id)
		}
		info, err := m.pauseBox(ctx, b, "sessions.pause")
		if err != nil {
			return out, err
		}
		if info != nil {
			out = append(out, *info)
		}
	}
	return out, nil
}

// Resume restores every paused sandbox of the session now; with fresh,
// it discards them instead (audited), so the next run starts anew.
func (m *SessionSandboxes) Resume(ctx context.Context, session string, fresh bool) ([]string, error) {
	if err := m.available(); err != nil {
		return nil, err
	}
	var out []string
	for _, b := range m.boxesOf(session) {
		m.mu.Lock()
		ckID := b.ckpt
		m.mu.Unlock()
		if ckID == "" {
			continue
		}
		if fresh {
			m.discard(ctx, b, "sessions.resume fresh")
			out = append(out, b.id)
			continue
		}
		if err := m.resumeBox(ctx, b, runtime.ImageRef{}); err != nil {
			return out, err
		}
		out = append(out, b.id)
	}
	return out, nil
}

// discard drops a paused box and its checkpoint.
func (m *SessionSandboxes) discard(ctx context.Context, b *sessionBox, why string) {
	b.life.Lock()
	m.mu.Lock()
	ckID := b.ckpt
	b.ckpt = ""
	delete(m.boxes, b.key)
	m.mu.Unlock()
	b.life.Unlock()
	m.endRuns(func(_ runKey, br *backgroundRun) bool { return br.box == b }, "its paused sandbox was discarded")
	if st, err := m.checkpoints(); err == nil && ckID != "" {
		_ = st.Remove(ckID)
	}
	_ = os.RemoveAll(b.skillsDir)
	_ = m.journal.Record(context.WithoutCancel(ctx), &audit.Record{Event: audit.EventSessionCheckpoint, SessionID: b.key.session, Outcome: "discarded",
		Detail: map[string]string{"sandbox": b.id, "checkpoint": ckID, "why": why}})
}

// Fork gives session dst a sandbox restored from each of src's: from its
// checkpoint when paused, else from one taken with the sandbox left
// running (and removed after). Each fork has its own copy of /work.
func (m *SessionSandboxes) Fork(ctx context.Context, src, dst string) ([]string, error) {
	if err := m.available(); err != nil {
		return nil, err
	}
	var out []string
	for _, b := range m.boxesOf(src) {
		nb, err := m.forkBox(ctx, b, dst)
		if err != nil {
			return out, err
		}
		out = append(out, nb.id)
	}
	return out, nil
}

func (m *SessionSandboxes) forkBox(ctx context.Context, b *sessionBox, dst string) (_ *sessionBox, err error) {
	key := b.key
	key.session = dst
	nb := &sessionBox{key: key, rootfs: b.rootfs, id: newBoxID(), ready: make(chan struct{}), skills: map[string]placedSkill{}, uid: b.uid, hasUID: b.hasUID}
	nb.skillsDir = filepath.Join(m.o.Dir, nb.id)
	rec := &audit.Record{Event: audit.EventSessionFork, SessionID: dst, Outcome: audit.OutcomeOK,
		Detail: map[string]string{"from_session": b.key.session, "from_sandbox": b.id, "sandbox": nb.id}}
	var ckID string
	temp := false
	// A fork that fails removes all it made (the checkpoint it took, the
	// fork's skills dir; a restore that fails removes its own sandbox) and
	// is audited with what it left the source in.
	defer func() {
		if temp {
			if st, serr := m.checkpoints(); serr == nil {
				_ = st.Remove(ckID)
			}
		}
		if err == nil {
			return
		}
		_ = os.RemoveAll(nb.skillsDir)
		rec.Outcome, rec.Error = audit.OutcomeError, err.Error()
		_ = m.journal.Record(context.WithoutCancel(ctx), rec)
	}()

	b.life.Lock()
	m.mu.Lock()
	sb := b.sb
	ckID = b.ckpt
	m.mu.Unlock()
	if sb != nil {
		ck, _, cerr := m.takeCheckpoint(ctx, b, sb, true)
		if cerr != nil {
			var left string
			rec.Detail["left"], left = leftRunning, "runs on as before"
			if sandboxGone(sb) {
				rec.Detail["left"], left = leftClosed, "is closed (its processes and /work are gone)"
				m.lose(ctx, b, sb, "fork", cerr)
			}
			cerr = withContext(cerr, "session %s was not forked, and its sandbox %s %s", b.key.session, b.id, left)
			b.life.Unlock()
			return nil, cerr
		}
		ckID, temp = ck.ID(), true
	}
	b.life.Unlock()
	rec.Detail["checkpoint"] = ckID
	if err := copySkillTree(b.skillsDir, nb.skillsDir); err != nil {
		return nil, fmt.Errorf("copy the skills of sandbox %s for its fork: %w", b.id, err)
	}
	m.mu.Lock()
	for n, ps := range b.skills {
		nb.skills[n] = ps
	}
	m.mu.Unlock()
	nb.spec = b.spec
	nb.spec.ID = nb.id
	nb.spec.Session = &runtime.SessionMounts{SkillsDir: nb.skillsDir, Layers: b.spec.Session.Layers, Supervisor: b.spec.Session.Supervisor}
	nb.spec.OnBackgroundExit = m.exitHook(dst)
	began := time.Now()
	nsb, used, err := m.restoreInto(ctx, nb, ckID, runtime.ImageRef{})
	if err != nil {
		return nil, err
	}
	rec.Detail["digest"], rec.Detail["duration_ms"] = used.Digest(), fmt.Sprint(time.Since(began).Milliseconds())
	_ = m.journal.Record(context.WithoutCancel(ctx), rec)
	nb.sb, nb.lastUsed = nsb, time.Now()
	close(nb.ready)
	m.mu.Lock()
	m.boxes[key] = nb
	m.mu.Unlock()
	return nb, nil
}

// boxesOf are the session's boxes that booted.
func (m *SessionSandboxes) boxesOf(session string) []*sessionBox {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*sessionBox
	for k, b := range m.boxes {
		if k.session != session {
			continue
		}
		select {
		case <-b.ready:
			if b.err == nil {
				out = append(out, b)
			}
		default:
		}
	}
	return out
}

// pauseIdle checkpoints sandboxes that had no run for the idle timeout.
func (m *SessionSandboxes) pauseIdle() {
	defer m.bg.Done()
	every := min(m.o.Config.IdleTimeout/4, 30*time.Second)
	if every < time.Second {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		var idle []*sessionBox
		for _, b := range m.boxes {
			if b.sb != nil && b.active == 0 && time.Since(b.lastUsed) > m.o.Config.IdleTimeout {
				idle = append(idle, b)
			}
		}
		m.mu.Unlock()
		for _, b := range idle {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			if _, err := m.pauseBox(ctx, b, "idle"); err != nil {
				// One that runs on (refused by a budget too) is tried
				// again after another idle timeout (pauseBox).
				m.log.Warn("pausing an idle session sandbox failed", "sandbox", b.id, "error", err)
			}
			cancel()
		}
	}
}

// Recover finds the paused sandboxes a daemon before this one left in
// the checkpoint store, so that their sessions resume on their next run;
// keep says which sessions still exist (the checkpoints of others go).
func (m *SessionSandboxes) Recover(keep func(session string) bool) error {
	if m == nil || m.o.Backend == nil || m.o.Checkpoints == "" {
		return nil
	}
	defer m.sweepSkillsDirs()
	if _, err := os.Stat(m.o.Checkpoints); os.IsNotExist(err) {
		return nil
	}
	st, err := m.checkpoints()
	if err != nil {
		return err
	}
	ids, err := st.List()
	if err != nil {
		return err
	}
	for _, id := range ids {
		man, err := st.Manifest(id)
		if err != nil || !keep(man.Session) {
			_ = st.Remove(id)
			continue
		}
		b, err := m.boxOfManifest(man)
		if err != nil {
			m.log.Warn("a session checkpoint cannot be used; removed", "checkpoint", id, "error", err)
			_ = st.Remove(id)
			continue
		}
		m.mu.Lock()
		if _, dup := m.boxes[b.key]; dup {
			m.mu.Unlock()
			_ = st.Remove(id)
			continue
		}
		m.boxes[b.key] = b
		m.mu.Unlock()
		// Its background runs are listed (runs.list) before it resumes.
		var metas []backgroundMeta
		_ = json.Unmarshal([]byte(man.Owner[ownerBackground]), &metas)
		m.adoptRuns(b, metas)
		m.log.Info("paused session sandbox found", "session", man.Session, "sandbox", b.id, "checkpoint", id)
	}
	return nil
}

// boxOfManifest makes the paused box a checkpoint describes.
func (m *SessionSandboxes) boxOfManifest(man *checkpoint.Manifest) (*sessionBox, error) {
	o := man.Owner
	var lim runtime.Limits
	if err := json.Unmarshal([]byte(o[ownerLimits]), &lim); err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	var img runtime.ImageRef
	if err := json.Unmarshal([]byte(o[ownerImageRef]), &img); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	var skills map[string][2]string
	if err := json.Unmarshal([]byte(o[ownerSkills]), &skills); err != nil {
		return nil, fmt.Errorf("skills: %w", err)
	}
	if !runtime.JobIDPattern.MatchString(o[ownerBox]) {
		return nil, fmt.Errorf("sandbox id %q", o[ownerBox])
	}
	b := &sessionBox{key: boxKey{session: man.Session, image: o[ownerImageName], limits: lim.Sandbox()}, id: o[ownerBox], rootfs: o[ownerRootFS],
		ready: make(chan struct{}), skills: map[string]placedSkill{}, ckpt: man.ID}
	if man.UID != nil {
		b.uid, b.hasUID = *man.UID, true
	}
	b.skillsDir = filepath.Join(m.o.Dir, b.id)
	if _, err := os.Stat(b.skillsDir); err != nil {
		return nil, fmt.Errorf("its skills dir: %w", err)
	}
	for n, v := range skills {
		b.skills[n] = placedSkill{root: v[0], digest: v[1]}
	}
	b.spec = runtime.SandboxSpec{ID: b.id, RootFS: b.rootfs, Image: img, Limits: lim, Boot: runtime.BootSession,
		Session:          &runtime.SessionMounts{SkillsDir: b.skillsDir, Layers: o[ownerLayers], Supervisor: m.o.Supervisor},
		OnBackgroundExit: m.exitHook(man.Session)}
	close(b.ready)
	return b, nil
}

// SessionDirPIDPrefix starts the name of the dir in which a process other
// than the daemon keeps its session sandboxes' skills dirs.
const SessionDirPIDPrefix = "pid-"

// sweepSkillsDirs removes the skills dirs of sandboxes a dead daemon left
// (no box of this one names them), and the dirs of processes that ended.
func (m *SessionSandboxes) sweepSkillsDirs() {
	ents, err := os.ReadDir(m.o.Dir)
	if err != nil {
		return
	}
	m.mu.Lock()
	known := map[string]bool{}
	for _, b := range m.boxes {
		known[b.id] = true
	}
	m.mu.Unlock()
	for _, e := range ents {
		name := e.Name()
		if _, ok := strings.CutPrefix(name, SessionDirPIDPrefix); ok {
			if deadPIDDir(name) {
				m.log.Info("removing the leftover session sandboxes dir of a process that ended", "dir", filepath.Join(m.o.Dir, name))
				_ = os.RemoveAll(filepath.Join(m.o.Dir, name))
			}
			continue
		}
		if !known[name] {
			// Its sandbox (run dir, mounts, runtime state) is the
			// runtime's sweep's.
			m.log.Info("removing the leftover skills dir of a session sandbox no session owns", "sandbox", name)
			_ = os.RemoveAll(filepath.Join(m.o.Dir, name))
		}
	}
}

// deadPIDDir says whether name is a SessionDirPIDPrefix dir whose process
// is gone.
func deadPIDDir(name string) bool {
	pid, ok := strings.CutPrefix(name, SessionDirPIDPrefix)
	if !ok {
		return false
	}
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false
	}
	err = unix.Kill(n, 0)
	return err != nil && !errors.Is(err, unix.EPERM)
}

// sweepDeadPIDDirs removes, beside this process's own, the session
// sandboxes dirs of processes that died without removing theirs (a
// process other than the daemon removes its dir when it ends).
func sweepDeadPIDDirs(parent, own string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.Name() != own && deadPIDDir(e.Name()) {
			_ = os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
}
