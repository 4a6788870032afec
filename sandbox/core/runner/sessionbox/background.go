package sessionbox

import (
	"context"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// backgroundRun is a background run as the engine follows it.
type backgroundRun struct {
	session string
	box     *sessionBox
	// skill is set for a run a restore brought back (plan then holds only
	// the run id and script).
	skill string
	plan  *Run
	start *audit.Record
	run   runtime.BackgroundRun
	done  chan struct{} // closed when it ended
}

// StartBackground starts a background run in its session's sandbox; start
// is its audited run.start record, whose run.end is written when it ends.
func (m *Sandboxes) StartBackground(ctx context.Context, p *Run, job runtime.Job, start *audit.Record) (runtime.BackgroundRun, string, error) {
	if max := m.o.Config.BackgroundRuns; max > 0 && m.liveBackground(p.SessionID) >= max {
		return runtime.BackgroundRun{}, "", errkind.Errorf(errkind.LimitExceeded, "session %s has %d background runs, its limit (sessions { background_runs }): wait for one or stop one with runs.signal", p.SessionID, max)
	}
	b, inv, err := m.deliver(ctx, p, job)
	if err != nil {
		return runtime.BackgroundRun{}, "", err
	}
	br := &backgroundRun{session: p.SessionID, box: b, plan: p, start: start, done: make(chan struct{})}
	rk := runKey{p.SessionID, p.ID}
	m.mu.Lock()
	m.runs[rk] = br
	m.mu.Unlock()
	sb, done := m.use(b)
	defer done()
	run, err := sb.Background(ctx, p.ID, inv)
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

func (m *Sandboxes) liveBackground(session string) int {
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
func (m *Sandboxes) exitHook(session string) func(runtime.BackgroundRun) {
	return func(run runtime.BackgroundRun) { m.backgroundExited(session, run) }
}

// backgroundExited is the sandboxes' report of a background run's end:
// its run.end record is written once.
func (m *Sandboxes) backgroundExited(session string, run runtime.BackgroundRun) {
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
func (m *Sandboxes) recordEnd(br *backgroundRun, reason runtime.Reason, code int, signal, why string) {
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
func (m *Sandboxes) lookup(session, runID string) (*backgroundRun, error) {
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

func (m *Sandboxes) view(br *backgroundRun) BackgroundRun {
	m.mu.Lock()
	run := br.run
	paused := br.box.sb == nil && br.box.ckpt != ""
	m.mu.Unlock()
	if run.ID == "" {
		run.ID = br.plan.ID
	}
	return BackgroundRun{BackgroundRun: run, SessionID: br.session, Sandbox: br.box.id, Skill: br.skillName(), Script: br.plan.Script,
		Paused: paused && run.Running}
}

func (br *backgroundRun) skillName() string {
	if br.skill != "" {
		return br.skill
	}
	return br.plan.Skill
}

// Background lists the session's background runs, oldest first.
func (m *Sandboxes) Background(session string) []BackgroundRun {
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
func (m *Sandboxes) BackgroundRunOf(session, runID string) (BackgroundRun, error) {
	br, err := m.lookup(session, runID)
	if err != nil {
		return BackgroundRun{}, err
	}
	return m.view(br), nil
}

// Wait waits until the background run ended or ctx is done, and returns
// it as it is then.
func (m *Sandboxes) Wait(ctx context.Context, session, runID string) (BackgroundRun, error) {
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
func (m *Sandboxes) Signal(ctx context.Context, session, runID string, sig syscall.Signal) (BackgroundRun, error) {
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
func (m *Sandboxes) Logs(session, runID string, offset, n int64) (data []byte, size int64, err error) {
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
func (m *Sandboxes) endRuns(match func(runKey, *backgroundRun) bool, why string) {
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
