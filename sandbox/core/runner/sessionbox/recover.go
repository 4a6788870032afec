package sessionbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/checkpoint"
)

// Recover finds the paused sandboxes a daemon before this one left in
// the checkpoint store, so that their sessions resume on their next run;
// keep says which sessions still exist (the checkpoints of others go).
func (m *Sandboxes) Recover(keep func(session string) bool) error {
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
func (m *Sandboxes) boxOfManifest(man *checkpoint.Manifest) (*sessionBox, error) {
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

// DirPIDPrefix starts the name of the dir in which a process other
// than the daemon keeps its session sandboxes' skills dirs.
const DirPIDPrefix = "pid-"

// sweepSkillsDirs removes the skills dirs of sandboxes a dead daemon left
// (no box of this one names them), and the dirs of processes that ended.
func (m *Sandboxes) sweepSkillsDirs() {
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
		if _, ok := strings.CutPrefix(name, DirPIDPrefix); ok {
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

// deadPIDDir says whether name is a DirPIDPrefix dir whose process
// is gone.
func deadPIDDir(name string) bool {
	pid, ok := strings.CutPrefix(name, DirPIDPrefix)
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
