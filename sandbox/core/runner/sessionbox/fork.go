package sessionbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// Fork gives session dst a sandbox restored from each of src's: from its
// checkpoint when paused, else from one taken with the sandbox left
// running (and removed after). Each fork has its own copy of /work.
func (m *Sandboxes) Fork(ctx context.Context, src, dst string) ([]string, error) {
	if err := m.Available(); err != nil {
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

func (m *Sandboxes) forkBox(ctx context.Context, b *sessionBox, dst string) (_ *sessionBox, err error) {
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
