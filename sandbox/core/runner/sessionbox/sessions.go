// Package sessionbox is the session sandboxes: what isolation = "session"
// runs go to. A session has one sandbox for each image (and set of
// sandbox-wide limits) it has run in, booted by the first run and destroyed
// with the session. Runs are delivered into it with the skill paths of a
// session sandbox (each active skill at SkillsMount/<name>, its dependency
// layer under SessionLayersMount), so one sandbox serves every skill of the
// session. Background runs live here too: started, followed (runs.*) and
// ended with their sandbox, every start and end audited. A sandbox is
// paused, resumed and forked through runtime/checkpoint (pause.go).
package sessionbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/checkpoint"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// Options wire the session sandboxes of an engine.
type Options struct {
	// Backend is the runtime when it can keep session sandboxes (runsc);
	// nil: isolation = "session" is refused with the reason.
	Backend runtime.SessionBackend
	// Dir holds each session sandbox's skills dir (root's, 0700).
	Dir string
	// Supervisor is the skillbox binary run inside as the supervisor.
	Supervisor string
	// Checkpoints is where paused sandboxes go (root's, 0700); "": none
	// (sessions.pause and idle checkpoints are then refused).
	Checkpoints string
	Config      policy.SessionConfig
	// MinFree is the free space the checkpoints' filesystem must keep
	// (the audit's min_free): no checkpoint takes it below.
	MinFree int64
}

// Sandboxes keeps the session sandboxes of one daemon.
type Sandboxes struct {
	o       Options
	journal audit.Recorder
	log     hclog.Logger

	mu    sync.Mutex
	boxes map[boxKey]*sessionBox
	runs  map[runKey]*backgroundRun
	store *checkpoint.Store // opened on first use
	// lost says, by session, why a failed pause or fork closed one of its
	// sandboxes; the session's next run is refused once with it (at most
	// one per session, gone with the session).
	lost map[string]string
	stop chan struct{}
	bg   sync.WaitGroup
	// sweepPIDDirs runs once, at the first boot of a process other than
	// the daemon (sweepDeadPIDDirs).
	sweepPIDDirs sync.Once
}

// runKey names a background run: a fork has its source's runs under the
// same ids.
type runKey struct{ session, run string }

// boxKey says which runs share a sandbox: one session, one image (by
// name: a rebuilt image must not silently leave a paused sandbox behind),
// one set of sandbox-wide limits (memory, pids, CPUs and tmpfs sizes are
// fixed when a sandbox boots).
type boxKey struct {
	session string
	image   string
	limits  runtime.SandboxLimits
}

type sessionBox struct {
	key       boxKey
	id        string
	rootfs    string
	skillsDir string
	skills    map[string]placedSkill // by name: what is in skillsDir
	ready     chan struct{}          // closed once booted (or failed: err)
	err       error
	// spec is what the sandbox was made from, to restore it.
	spec runtime.SandboxSpec
	// uid is the session owner's (hasUID: known), whose checkpoint
	// budget its checkpoints are charged to.
	uid    uint32
	hasUID bool

	// life serializes boot, restore, pause and teardown of the box.
	life sync.Mutex
	// Under Sandboxes.mu: the live sandbox (nil while paused),
	// the checkpoint it is paused in, runs under way, last use.
	sb       runtime.SessionSandbox
	ckpt     string
	active   int
	lastUsed time.Time
}

// placedSkill is a skill version copied into a box's skills dir.
type placedSkill struct{ root, digest string }

// Run is what a session sandbox needs of a planned run.
type Run struct {
	ID        string
	SessionID string
	// Owner is who asked: the session's owner, whose checkpoint budget the
	// sandbox is charged to.
	Owner *api.Peer
	// Skill names the run's skill(s) in errors and runs.* views ("": none).
	Skill  string
	Script string
	// SkillDigest is a script run's skill version: its copy (the job's
	// SkillDir) is placed at SkillsMount/<Skill>, and SkillMount paths
	// move there.
	SkillDigest string
	// Code: a code run, whose skills (Mounts) are each placed at
	// SkillsMount/<name>; Program: with a program of its own, removed when
	// the run ends.
	Code    bool
	Mounts  []Skill
	Program bool
}

// Skill is one skill version a run mounts: its copy at Root.
type Skill struct{ Name, Root, Digest string }

// newBoxID is a new session sandbox's id (its container's too).
func newBoxID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return runtime.IDPrefix + "s" + hex.EncodeToString(b[:])
}

// New makes the keeper of session sandboxes.
func New(o Options, journal audit.Recorder, log hclog.Logger) *Sandboxes {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if journal == nil {
		journal = audit.NewJournal(nil, nil)
	}
	m := &Sandboxes{o: o, journal: journal, log: log.Named("sessions"),
		boxes: map[boxKey]*sessionBox{}, runs: map[runKey]*backgroundRun{}, lost: map[string]string{}, stop: make(chan struct{})}
	if o.Config.IdleTimeout > 0 && o.Backend != nil && o.Checkpoints != "" {
		m.bg.Add(1)
		go m.pauseIdle()
	}
	return m
}

// Available says why session isolation cannot be had here, or nil.
func (m *Sandboxes) Available() error {
	if m == nil || m.o.Backend == nil {
		return errkind.Errorf(errkind.Unavailable, "isolation = \"session\" needs the runsc runtime (gVisor checkpoint/restore and a sandbox that outlives a run): this daemon's runtime cannot keep session sandboxes; use runtime = \"runsc\", or isolation = \"run\" for the skill")
	}
	if m.o.Supervisor == "" || m.o.Dir == "" {
		return errkind.Errorf(errkind.Unavailable, "session sandboxes are not set up in this process (no supervisor binary or state dir)")
	}
	return nil
}

// box returns the session's sandbox for key, booting it on first use.
func (m *Sandboxes) box(ctx context.Context, key boxKey, owner *api.Peer, img runtime.ImageRef, rootfs, layers string, lim runtime.Limits) (*sessionBox, error) {
	m.mu.Lock()
	if why, ok := m.lost[key.session]; ok {
		delete(m.lost, key.session)
		m.mu.Unlock()
		return nil, errkind.Errorf(errkind.Unavailable, "%s", why)
	}
	b := m.boxes[key]
	if b != nil {
		select {
		case <-b.ready:
			if b.err == nil && b.sb != nil {
				select {
				case <-b.sb.Done():
					// Its supervisor died: a new sandbox for this run,
					// and what is left of the old one goes.
					delete(m.boxes, key)
					go m.drop(b)
					b = nil
				default:
				}
			}
		default:
		}
	}
	if b == nil {
		if max := m.o.Config.MaxSandboxes; max > 0 && len(m.boxes) >= max {
			m.mu.Unlock()
			return nil, errkind.Errorf(errkind.LimitExceeded, "this daemon keeps at most %d session sandboxes (sessions { max_sandboxes }) and all are in use: close a session you no longer need, or ask an administrator to raise the limit", max)
		}
		b = &sessionBox{key: key, rootfs: rootfs, id: newBoxID(), ready: make(chan struct{}), skills: map[string]placedSkill{}}
		if owner != nil {
			b.uid, b.hasUID = owner.UID, true
		}
		m.boxes[key] = b
		m.mu.Unlock()
		sb, err := m.boot(ctx, b, img, layers, lim)
		m.mu.Lock()
		b.sb, b.err = sb, err
		m.mu.Unlock()
		if b.err != nil {
			m.mu.Lock()
			if m.boxes[key] == b {
				delete(m.boxes, key)
			}
			m.mu.Unlock()
		}
		close(b.ready)
	} else {
		m.mu.Unlock()
	}
	select {
	case <-b.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if b.err != nil {
		return nil, b.err
	}
	if err := m.resumeBox(ctx, b, img); err != nil {
		return nil, err
	}
	return b, nil
}

func (m *Sandboxes) boot(ctx context.Context, b *sessionBox, img runtime.ImageRef, layers string, lim runtime.Limits) (runtime.SessionSandbox, error) {
	b.skillsDir = filepath.Join(m.o.Dir, b.id)
	if err := oci.MakePrivateDir(m.o.Dir, "session sandboxes dir"); err != nil {
		return nil, err
	}
	if parent := filepath.Dir(m.o.Dir); strings.HasPrefix(filepath.Base(m.o.Dir), DirPIDPrefix) {
		if err := oci.MakePrivateDir(parent, "session sandboxes dir"); err != nil {
			return nil, err
		}
		m.sweepPIDDirs.Do(func() { sweepDeadPIDDirs(parent, filepath.Base(m.o.Dir)) })
	}
	if err := oci.MakeSessionSkillsDir(b.skillsDir); err != nil {
		return nil, err
	}
	spec := runtime.SandboxSpec{
		ID: b.id, RootFS: b.rootfs, Image: img, Limits: lim, Boot: runtime.BootSession,
		Session:          &runtime.SessionMounts{SkillsDir: b.skillsDir, Layers: layers, Supervisor: m.o.Supervisor},
		OnBackgroundExit: m.exitHook(b.key.session),
	}
	b.spec = spec
	sb, err := m.o.Backend.CreateSession(ctx, spec)
	rec := &audit.Record{Event: audit.EventSessionSandbox, SessionID: b.key.session, Outcome: "started",
		Detail: map[string]string{"sandbox": b.id, "image": img.Name, "image_digest": img.Digest}}
	if err != nil {
		_ = os.RemoveAll(b.skillsDir)
		rec.Outcome, rec.Error = audit.OutcomeError, err.Error()
	}
	_ = m.journal.Record(context.WithoutCancel(ctx), rec)
	if err != nil {
		return nil, err
	}
	m.log.Info("session sandbox started", "session", b.key.session, "sandbox", b.id, "image", img.Name)
	return sb, nil
}

// placeSkill makes SkillsMount/<name> in the box the skill version whose
// pinned copy is root: a copy of it (not hard links: a pinned copy's files
// have one link each, which is how its readers know nothing outside
// shares them), built beside the old one and swapped in, so a run sees
// one version or the other, never half of one. Skill copies are small
// (the snapshot store caps them).
func (m *Sandboxes) placeSkill(b *sessionBox, name, root, digest string) error {
	m.mu.Lock()
	same := b.skills[name].root == root
	m.mu.Unlock()
	if same {
		return nil
	}
	dst := filepath.Join(b.skillsDir, name)
	tmp := filepath.Join(b.skillsDir, ".new-"+name)
	_ = os.RemoveAll(tmp)
	if err := copySkillTree(root, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("put skill %q into its session sandbox: %w", name, err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE); err == nil {
		_ = os.RemoveAll(tmp) // the old version, now at tmp
	} else if err := os.Rename(tmp, dst); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("put skill %q into its session sandbox: %w", name, err)
	}
	m.mu.Lock()
	b.skills[name] = placedSkill{root: root, digest: digest}
	m.mu.Unlock()
	return nil
}

// copySkillTree copies the tree at src to dst: directories 0755 and files
// 0644 or 0755 (the sandbox's user reads them), symlinks as they are.
// Nothing is followed.
func copySkillTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, 0o755); err != nil {
				return err
			}
			return os.Chmod(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			mode := os.FileMode(0o644)
			if info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, data, mode); err != nil {
				return err
			}
			return os.Chmod(to, mode)
		}
		return nil // special files are not part of a skill copy
	})
}

// sessionJob is job with the paths of a session sandbox: the skill at
// SkillsMount/<name> instead of SkillMount, the dependency layer under
// SessionLayersMount instead of DepsMount, a run_code program in a dir
// of its own.
func (m *Sandboxes) sessionJob(b *sessionBox, p *Run, job runtime.Job, layersRoot string) (runtime.Invocation, error) {
	moves := map[string]string{}
	if !p.Code {
		if err := m.placeSkill(b, p.Skill, job.Sandbox.SkillDir, p.SkillDigest); err != nil {
			return runtime.Invocation{}, err
		}
		moves[runtime.SkillMount] = runtime.SkillTarget(p.Skill)
	} else {
		for _, mt := range p.Mounts {
			if err := m.placeSkill(b, mt.Name, mt.Root, mt.Digest); err != nil {
				return runtime.Invocation{}, err
			}
		}
	}
	if job.Sandbox.DepsDir != "" {
		rel, err := filepath.Rel(layersRoot, job.Sandbox.DepsDir)
		if err != nil || strings.HasPrefix(rel, "..") {
			return runtime.Invocation{}, errkind.Errorf(errkind.Internal, "dependency layer %s is outside the layer store %s", job.Sandbox.DepsDir, layersRoot)
		}
		moves[runtime.DepsMount] = runtime.SessionLayersMount + "/" + filepath.ToSlash(rel)
	}
	if prog := job.Sandbox.Program; prog != nil {
		dir := filepath.Join(b.skillsDir, path.Base(runtime.ProgramDir), p.ID)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return runtime.Invocation{}, fmt.Errorf("write program: %w", err)
		}
		f := filepath.Join(dir, prog.Name)
		if err := os.WriteFile(f, prog.Data, 0o644); err != nil {
			return runtime.Invocation{}, fmt.Errorf("write program: %w", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return runtime.Invocation{}, err
		}
		if err := os.Chmod(f, 0o644); err != nil {
			return runtime.Invocation{}, err
		}
		moves[prog.Path()] = runtime.ProgramDir + "/" + p.ID + "/" + prog.Name
	}
	move := func(s string) string {
		for from, to := range moves {
			if s == from {
				return to
			}
			if strings.HasPrefix(s, from+"/") {
				return to + s[len(from):]
			}
		}
		return s
	}
	args := make([]string, len(job.Invocation.Args))
	for i, a := range job.Invocation.Args {
		args[i] = move(a)
	}
	modEnv := make([]string, len(job.Invocation.ModuleEnv))
	for i, kv := range job.Invocation.ModuleEnv {
		k, v, _ := strings.Cut(kv, "=")
		parts := strings.Split(v, ":")
		for j := range parts {
			parts[j] = move(parts[j])
		}
		modEnv[i] = k + "=" + strings.Join(parts, ":")
	}
	inv := job.Invocation
	inv.Args, inv.ModuleEnv = args, modEnv
	return inv, nil
}

// deliver finds (or boots) the run's session sandbox and makes its
// invocation.
func (m *Sandboxes) deliver(ctx context.Context, p *Run, job runtime.Job) (*sessionBox, runtime.Invocation, error) {
	if err := m.Available(); err != nil {
		return nil, runtime.Invocation{}, err
	}
	if job.Sandbox.Network || job.Sandbox.Egress != nil {
		return nil, runtime.Invocation{}, errkind.Errorf(errkind.Unavailable, "a session sandbox has no network: skill %q has network or egress by policy, so give it isolation = \"run\"", p.Skill)
	}
	layersRoot := ""
	if job.Sandbox.DepsDir != "" {
		// <images>/layers/sha256-<hex>/tree (images/deps.Store).
		layersRoot = filepath.Dir(filepath.Dir(job.Sandbox.DepsDir))
	}
	key := boxKey{session: p.SessionID, image: job.Sandbox.Image.Name, limits: job.Sandbox.Limits.Sandbox()}
	b, err := m.box(ctx, key, p.Owner, job.Sandbox.Image, job.Sandbox.RootFS, layersRoot, job.Sandbox.Limits)
	if err != nil {
		return nil, runtime.Invocation{}, err
	}
	inv, err := m.sessionJob(b, p, job, layersRoot)
	return b, inv, err
}

// Foreground delivers a foreground run into its session's sandbox, which it
// names.
func (m *Sandboxes) Foreground(ctx context.Context, p *Run, job runtime.Job) (*runtime.Result, string, error) {
	b, inv, err := m.deliver(ctx, p, job)
	if err != nil {
		return nil, "", err
	}
	sb, done := m.use(b)
	defer done()
	if p.Program {
		// The program is the run's alone: gone with it, so a long session
		// does not pile them up.
		defer os.RemoveAll(filepath.Join(b.skillsDir, path.Base(runtime.ProgramDir), p.ID))
	}
	res, err := sb.Run(ctx, p.ID, inv)
	return res, b.id, err
}

// drop tears down a box whose sandbox died, with its skills dir.
func (m *Sandboxes) drop(b *sessionBox) {
	b.life.Lock()
	defer b.life.Unlock()
	m.mu.Lock()
	sb := b.sb
	b.sb = nil
	m.mu.Unlock()
	if sb != nil {
		_ = sb.Destroy(context.Background())
	}
	_ = os.RemoveAll(b.skillsDir)
	m.endRuns(func(_ runKey, br *backgroundRun) bool { return br.box == b }, "its session sandbox ended")
	_ = m.journal.Record(context.Background(), &audit.Record{Event: audit.EventSessionSandbox, SessionID: b.key.session, Outcome: "destroyed",
		Detail: map[string]string{"sandbox": b.id, "why": "its supervisor ended"}})
}

// use marks a run under way in the box (so it is not paused under it)
// and returns its live sandbox; done ends that.
func (m *Sandboxes) use(b *sessionBox) (runtime.SessionSandbox, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b.active++
	b.lastUsed = time.Now()
	return b.sb, func() {
		m.mu.Lock()
		b.active--
		b.lastUsed = time.Now()
		m.mu.Unlock()
	}
}

// CloseSession destroys the session's sandboxes, and with them its
// background runs (their run.end says the session closed).
func (m *Sandboxes) CloseSession(ctx context.Context, session, why string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.lost, session)
	var boxes []*sessionBox
	for k, b := range m.boxes {
		if k.session == session {
			boxes = append(boxes, b)
			delete(m.boxes, k)
		}
	}
	m.mu.Unlock()
	m.endRuns(func(k runKey, _ *backgroundRun) bool { return k.session == session }, why)
	for _, b := range boxes {
		<-b.ready
		b.life.Lock()
		m.mu.Lock()
		sb, ckpt := b.sb, b.ckpt
		b.sb, b.ckpt = nil, ""
		m.mu.Unlock()
		var err error
		if sb != nil {
			err = sb.Destroy(ctx)
		}
		if ckpt != "" && m.store != nil {
			if rerr := m.store.Remove(ckpt); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		b.life.Unlock()
		if sb == nil && ckpt == "" {
			continue
		}
		_ = os.RemoveAll(b.skillsDir)
		rec := &audit.Record{Event: audit.EventSessionSandbox, SessionID: session, Outcome: "destroyed",
			Detail: map[string]string{"sandbox": b.id, "why": why}}
		if err != nil {
			rec.Outcome, rec.Error = audit.OutcomeError, err.Error()
			m.log.Error("session sandbox teardown failed", "sandbox", b.id, "error", err)
		}
		_ = m.journal.Record(context.WithoutCancel(ctx), rec)
	}
}

// Close ends the keeper (daemon shutdown): every live session sandbox is
// paused into a checkpoint, so its session resumes after a restart; one
// that cannot be is destroyed.
func (m *Sandboxes) Close(ctx context.Context) {
	if m == nil {
		return
	}
	close(m.stop)
	m.bg.Wait()
	m.mu.Lock()
	var live []*sessionBox
	for _, b := range m.boxes {
		if b.sb != nil {
			live = append(live, b)
		}
	}
	m.mu.Unlock()
	if m.o.Checkpoints == "" {
		// Not the daemon: nothing outlives this process.
		defer func() {
			if strings.Contains(filepath.Base(m.o.Dir), DirPIDPrefix) {
				_ = os.RemoveAll(m.o.Dir)
			}
		}()
	}
	for _, b := range live {
		if m.o.Checkpoints == "" {
			m.CloseSession(ctx, b.key.session, "stopped")
			continue
		}
		if _, err := m.pauseBox(ctx, b, "daemon stopped"); err != nil {
			m.log.Warn("session sandbox not paused at shutdown; destroyed", "sandbox", b.id, "error", err)
			m.CloseSession(ctx, b.key.session, "daemon stopped")
		}
	}
}
