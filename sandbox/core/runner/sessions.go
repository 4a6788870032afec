package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
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

// Session sandboxes are what isolation = "session" runs go to: per
// session, one sandbox for each image (and set of sandbox-wide limits) it
// has run in, booted by the first run and destroyed with the session.
// Runs are delivered into it with the skill paths of a session sandbox
// (each active skill at SkillsMount/<name>, its dependency layer under
// SessionLayersMount), so one sandbox serves every skill of the session.
// Background runs live here too: started, followed (runs.*) and ended with
// their sandbox, every start and end audited.

// SessionOptions wire the session sandboxes of an engine.
type SessionOptions struct {
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

// SessionSandboxes keeps the session sandboxes of one daemon.
type SessionSandboxes struct {
	o       SessionOptions
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
	// Under SessionSandboxes.mu: the live sandbox (nil while paused),
	// the checkpoint it is paused in, runs under way, last use.
	sb       runtime.SessionSandbox
	ckpt     string
	active   int
	lastUsed time.Time
}

// placedSkill is a skill version copied into a box's skills dir.
type placedSkill struct{ root, digest string }

// newBoxID is a new session sandbox's id (its container's too).
func newBoxID() string { return runtime.IDPrefix + "s" + strings.TrimPrefix(newID("ses_"), "ses_") }

// backgroundRun is a background run as the engine follows it.
type backgroundRun struct {
	session string
	box     *sessionBox
	// skill is set for a run a restore brought back (plan then holds only
	// the run id and script).
	skill string
	plan  *Plan
	start *audit.Record
	run   runtime.BackgroundRun
	done  chan struct{} // closed when it ended
}

// NewSessionSandboxes makes the keeper of session sandboxes.
func NewSessionSandboxes(o SessionOptions, journal audit.Recorder, log hclog.Logger) *SessionSandboxes {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if journal == nil {
		journal = audit.NewJournal(nil, nil)
	}
	m := &SessionSandboxes{o: o, journal: journal, log: log.Named("sessions"),
		boxes: map[boxKey]*sessionBox{}, runs: map[runKey]*backgroundRun{}, lost: map[string]string{}, stop: make(chan struct{})}
	if o.Config.IdleTimeout > 0 && o.Backend != nil && o.Checkpoints != "" {
		m.bg.Add(1)
		go m.pauseIdle()
	}
	return m
}

// available says why session isolation cannot be had here, or nil.
func (m *SessionSandboxes) available() error {
	if m == nil || m.o.Backend == nil {
		return errkind.Errorf(errkind.Unavailable, "isolation = \"session\" needs the runsc runtime (gVisor checkpoint/restore and a sandbox that outlives a run): this daemon's runtime cannot keep session sandboxes; use runtime = \"runsc\", or isolation = \"run\" for the skill")
	}
	if m.o.Supervisor == "" || m.o.Dir == "" {
		return errkind.Errorf(errkind.Unavailable, "session sandboxes are not set up in this process (no supervisor binary or state dir)")
	}
	return nil
}

// box returns the session's sandbox for key, booting it on first use.
func (m *SessionSandboxes) box(ctx context.Context, key boxKey, owner *api.Peer, img runtime.ImageRef, rootfs, layers string, lim runtime.Limits) (*sessionBox, error) {
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

func (m *SessionSandboxes) boot(ctx context.Context, b *sessionBox, img runtime.ImageRef, layers string, lim runtime.Limits) (runtime.SessionSandbox, error) {
	b.skillsDir = filepath.Join(m.o.Dir, b.id)
	if err := oci.MakePrivateDir(m.o.Dir, "session sandboxes dir"); err != nil {
		return nil, err
	}
	if parent := filepath.Dir(m.o.Dir); strings.HasPrefix(filepath.Base(m.o.Dir), SessionDirPIDPrefix) {
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
func (m *SessionSandboxes) placeSkill(b *sessionBox, name, root, digest string) error {
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
func (m *SessionSandboxes) sessionJob(b *sessionBox, p *Plan, job runtime.Job, layersRoot string) (runtime.Invocation, error) {
	moves := map[string]string{}
	if p.code == nil {
		if err := m.placeSkill(b, p.request.Skill.Name, job.Sandbox.SkillDir, p.request.Skill.Digest); err != nil {
			return runtime.Invocation{}, err
		}
		moves[runtime.SkillMount] = runtime.SkillTarget(p.request.Skill.Name)
	} else {
		for _, mt := range p.code.Mounts {
			if err := m.placeSkill(b, mt.Skill.Name, mt.Root, mt.Skill.Digest); err != nil {
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
		dir := filepath.Join(b.skillsDir, path.Base(runtime.ProgramDir), p.runID)
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
		moves[prog.Path()] = runtime.ProgramDir + "/" + p.runID + "/" + prog.Name
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
func (m *SessionSandboxes) deliver(ctx context.Context, p *Plan, job runtime.Job) (*sessionBox, runtime.Invocation, error) {
	if err := m.available(); err != nil {
		return nil, runtime.Invocation{}, err
	}
	if job.Sandbox.Network || job.Sandbox.Egress != nil {
		return nil, runtime.Invocation{}, errkind.Errorf(errkind.Unavailable, "a session sandbox has no network: skill %q has network or egress by policy, so give it isolation = \"run\"", p.SkillName())
	}
	layersRoot := ""
	if job.Sandbox.DepsDir != "" {
		// <images>/layers/sha256-<hex>/tree (images/deps.Store).
		layersRoot = filepath.Dir(filepath.Dir(job.Sandbox.DepsDir))
	}
	key := boxKey{session: p.origin.SessionID, image: job.Sandbox.Image.Name, limits: job.Sandbox.Limits.Sandbox()}
	b, err := m.box(ctx, key, p.origin.Peer, job.Sandbox.Image, job.Sandbox.RootFS, layersRoot, job.Sandbox.Limits)
	if err != nil {
		return nil, runtime.Invocation{}, err
	}
	inv, err := m.sessionJob(b, p, job, layersRoot)
	return b, inv, err
}

// run delivers a foreground run into its session's sandbox, which it
// names.
func (m *SessionSandboxes) run(ctx context.Context, p *Plan, job runtime.Job) (*runtime.Result, string, error) {
	b, inv, err := m.deliver(ctx, p, job)
	if err != nil {
		return nil, "", err
	}
	sb, done := m.use(b)
	defer done()
	if p.code != nil && p.code.Program != nil {
		// The program is the run's alone: gone with it, so a long session
		// does not pile them up.
		defer os.RemoveAll(filepath.Join(b.skillsDir, path.Base(runtime.ProgramDir), p.runID))
	}
	res, err := sb.Run(ctx, p.runID, inv)
	return res, b.id, err
}

// drop tears down a box whose sandbox died, with its skills dir.
func (m *SessionSandboxes) drop(b *sessionBox) {
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
func (m *SessionSandboxes) use(b *sessionBox) (runtime.SessionSandbox, func()) {
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

// startBackground starts a background run in its session's sandbox; start
// is its audited run.start record, whose run.end is written when it ends.
func (m *SessionSandboxes) startBackground(ctx context.Context, p *Plan, job runtime.Job, start *audit.Record) (runtime.BackgroundRun, string, error) {
	if max := m.o.Config.BackgroundRuns; max > 0 && m.liveBackground(p.origin.SessionID) >= max {
		return runtime.BackgroundRun{}, "", errkind.Errorf(errkind.LimitExceeded, "session %s has %d background runs, its limit (sessions { background_runs }): wait for one or stop one with runs.signal", p.origin.SessionID, max)
	}
	b, inv, err := m.deliver(ctx, p, job)
	if err != nil {
		return runtime.BackgroundRun{}, "", err
	}
	br := &backgroundRun{session: p.origin.SessionID, box: b, plan: p, start: start, done: make(chan struct{})}
	rk := runKey{p.origin.SessionID, p.runID}
	m.mu.Lock()
	m.runs[rk] = br
	m.mu.Unlock()
	sb, done := m.use(b)
	defer done()
	run, err := sb.Background(ctx, p.runID, inv)
	if err != nil {
		m.mu.Lock()
		delete(m.runs, rk)
		m.mu.Unlock()
		return runtime.BackgroundRun{}, "", err
	}
	m.mu.Lock()
	if br.run.ID == "" { // not ended already
		br.run = run
	}
	m.mu.Unlock()
	return run, b.id, nil
}

func (m *SessionSandboxes) liveBackground(session string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.runs {
		if r.session == session && !isDone(r.done) {
			n++
		}
	}
	return n
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// exitHook is the report of a session's background run ends.
func (m *SessionSandboxes) exitHook(session string) func(runtime.BackgroundRun) {
	return func(run runtime.BackgroundRun) { m.backgroundExited(session, run) }
}

// backgroundExited is the sandboxes' report of a background run's end:
// its run.end record is written once.
func (m *SessionSandboxes) backgroundExited(session string, run runtime.BackgroundRun) {
	m.mu.Lock()
	br := m.runs[runKey{session, run.ID}]
	if br == nil || isDone(br.done) {
		m.mu.Unlock()
		return
	}
	br.run = run
	close(br.done)
	m.mu.Unlock()
	reason := runtime.ReasonExit
	if run.Signal != "" {
		reason = runtime.ReasonKilled
	}
	m.recordEnd(br, reason, run.ExitCode, run.Signal, "")
}

// recordEnd writes a background run's run.end record.
func (m *SessionSandboxes) recordEnd(br *backgroundRun, reason runtime.Reason, code int, signal, why string) {
	end := *br.start
	ri := *br.start.Run
	end.Run = &ri
	end.Event = audit.EventRunEnd
	end.Outcome = string(reason)
	ri.Ended = time.Now().UTC()
	ri.DurationMS = ri.Ended.Sub(ri.Started).Milliseconds()
	ri.ExitCode, ri.Signal, ri.Reason = &code, signal, string(reason)
	if why != "" {
		end.Detail = cloneDetail(end.Detail)
		end.Detail["ended_by"] = why
	}
	if err := m.journal.Record(context.Background(), &end); err != nil {
		m.log.Error("audit of a background run's end failed", "run_id", ri.RunID, "error", err)
	}
}

func cloneDetail(d map[string]string) map[string]string {
	out := make(map[string]string, len(d)+1)
	for k, v := range d {
		out[k] = v
	}
	return out
}

// BackgroundRun is one background run as runs.* report it.
type BackgroundRun struct {
	runtime.BackgroundRun
	SessionID string
	Sandbox   string
	Skill     string
	Script    string
	// Paused: its sandbox is in a checkpoint.
	Paused bool
}

// lookup finds a background run of session (any session when "").
func (m *SessionSandboxes) lookup(session, runID string) (*backgroundRun, error) {
	if m == nil {
		return nil, errkind.Errorf(errkind.NotFound, "no background run %q", runID)
	}
	m.mu.Lock()
	br := m.runs[runKey{session, runID}]
	m.mu.Unlock()
	if br == nil {
		return nil, errkind.Errorf(errkind.NotFound, "no background run %q in this session: runs.list names the session's background runs", runID)
	}
	return br, nil
}

func (m *SessionSandboxes) view(br *backgroundRun) BackgroundRun {
	m.mu.Lock()
	run := br.run
	paused := br.box.sb == nil && br.box.ckpt != ""
	m.mu.Unlock()
	if run.ID == "" {
		run.ID = br.plan.runID
	}
	return BackgroundRun{BackgroundRun: run, SessionID: br.session, Sandbox: br.box.id, Skill: br.skillName(), Script: br.plan.script,
		Paused: paused && run.Running}
}

func (br *backgroundRun) skillName() string {
	if br.skill != "" || (br.plan.code == nil && br.plan.request.Skill == nil) {
		return br.skill
	}
	return br.plan.SkillName()
}

// Background lists the session's background runs, oldest first.
func (m *SessionSandboxes) Background(session string) []BackgroundRun {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	var list []*backgroundRun
	for _, br := range m.runs {
		if br.session == session {
			list = append(list, br)
		}
	}
	m.mu.Unlock()
	out := make([]BackgroundRun, 0, len(list))
	for _, br := range list {
		out = append(out, m.view(br))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// BackgroundRunOf returns one background run of session.
func (m *SessionSandboxes) BackgroundRunOf(session, runID string) (BackgroundRun, error) {
	br, err := m.lookup(session, runID)
	if err != nil {
		return BackgroundRun{}, err
	}
	return m.view(br), nil
}

// Wait waits until the background run ended or ctx is done, and returns
// it as it is then.
func (m *SessionSandboxes) Wait(ctx context.Context, session, runID string) (BackgroundRun, error) {
	br, err := m.lookup(session, runID)
	if err != nil {
		return BackgroundRun{}, err
	}
	select {
	case <-br.done:
	case <-ctx.Done():
	}
	return m.view(br), nil
}

// Signal sends sig to a background run of session.
func (m *SessionSandboxes) Signal(ctx context.Context, session, runID string, sig syscall.Signal) (BackgroundRun, error) {
	br, err := m.lookup(session, runID)
	if err != nil {
		return BackgroundRun{}, err
	}
	m.mu.Lock()
	sb := br.box.sb
	m.mu.Unlock()
	if sb == nil {
		return BackgroundRun{}, errkind.Errorf(errkind.Unavailable, "run %s is in a paused session sandbox: resume the session (any run, or sessions.resume) first", runID)
	}
	if err := sb.Signal(ctx, runID, sig); err != nil {
		return BackgroundRun{}, errkind.Wrap(errkind.Unavailable, err)
	}
	return m.view(br), nil
}

// maxLogRead bounds one runs.logs answer.
const maxLogRead = 1 << 20

// Logs reads up to n bytes of a background run's log from offset. The log
// is in the sandbox's /work, which the sandbox can change: it is opened
// beneath the workdir, through no link, and must be a regular file.
func (m *SessionSandboxes) Logs(session, runID string, offset, n int64) (data []byte, size int64, err error) {
	br, err := m.lookup(session, runID)
	if err != nil {
		return nil, 0, err
	}
	if offset < 0 || n < 0 {
		return nil, 0, errkind.Errorf(errkind.InvalidParams, "offset and length must not be negative")
	}
	if n == 0 || n > maxLogRead {
		n = maxLogRead
	}
	m.mu.Lock()
	sb := br.box.sb
	m.mu.Unlock()
	if sb == nil {
		return nil, 0, errkind.Errorf(errkind.Unavailable, "run %s is in a paused session sandbox: resume the session (sessions.resume) to read its log", runID)
	}
	wd, err := unix.Open(sb.Workdir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, errkind.Errorf(errkind.Unavailable, "run %s's sandbox is gone: its log went with it", runID)
	}
	defer unix.Close(wd)
	rel := strings.TrimPrefix(runtime.SessionRunsDir, runtime.WorkDir+"/") + "/" + runID + ".log"
	fd, err := unix.Openat2(wd, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err == unix.ENOENT {
		return nil, 0, nil // nothing written yet
	}
	if err != nil {
		return nil, 0, errkind.Errorf(errkind.Unavailable, "run %s's log cannot be opened: %v", runID, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, 0, errkind.Errorf(errkind.Unavailable, "run %s's log is not a regular file any more (something in the sandbox replaced it)", runID)
	}
	size = st.Size()
	if offset >= size {
		return nil, size, nil
	}
	buf := make([]byte, min(n, size-offset))
	k, err := f.ReadAt(buf, offset)
	if err != nil && k == 0 {
		return nil, size, errkind.Errorf(errkind.Unavailable, "reading run %s's log: %v", runID, err)
	}
	return buf[:k], size, nil
}

// endRuns forgets the background runs match picks, and writes the run.end
// of each that had not ended (killed, for why).
func (m *SessionSandboxes) endRuns(match func(runKey, *backgroundRun) bool, why string) {
	m.mu.Lock()
	var ending []*backgroundRun
	for k, br := range m.runs {
		if match(k, br) {
			if !isDone(br.done) {
				close(br.done)
				ending = append(ending, br)
			}
			delete(m.runs, k)
		}
	}
	m.mu.Unlock()
	for _, br := range ending {
		m.recordEnd(br, runtime.ReasonKilled, 128+int(syscall.SIGKILL), "SIGKILL", why)
	}
}

// CloseSession destroys the session's sandboxes, and with them its
// background runs (their run.end says the session closed).
func (m *SessionSandboxes) CloseSession(ctx context.Context, session, why string) {
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
func (m *SessionSandboxes) Close(ctx context.Context) {
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
			if strings.Contains(filepath.Base(m.o.Dir), SessionDirPIDPrefix) {
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
