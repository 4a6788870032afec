package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/process"
)

// Serve's rules, for whoever reads the code before the host's:
//
//   - It is the only reaper: one loop calls wait4(-1) on SIGCHLD and hands
//     each status to the run or worker of that pid. Nothing here calls
//     os.Process.Wait or exec.Cmd.Wait. Natively (tests) it makes itself a
//     child subreaper, so orphans come back to it as they would to pid 1.
//   - Every run gets its own session and process group (setsid). When a
//     run's main process exits, its group is SIGKILLed.
//   - Between runs, a run's own processes are gone unless the run asked to
//     keep them: whenever no foreground run is active any more, a sweep of
//     /proc SIGKILLs every process (as pid 1: every one but itself; natively:
//     every descendant) that is not an idle python worker and not in the
//     session of a live background run. A background process that leaves
//     its run's session (setsid, a daemon's double fork) is therefore a
//     leftover, killed at the next sweep: a background run keeps exactly
//     what stays in its session.
//   - A foreground run's exit is sent after all its output, once its stdout
//     and stderr reached EOF. A process that left the run's session keeps
//     them open until the next sweep; when another foreground run keeps the
//     sweep from coming, the pipes are closed Options.DrainTimeout after
//     the main process exited, and what that process writes later is not
//     read.

// DefaultRunsDir is where background runs' logs go in a session sandbox.
const DefaultRunsDir = runtime.WorkDir + "/.skillbox/runs"

// DefaultDrainTimeout is Options.DrainTimeout's default.
const DefaultDrainTimeout = 5 * time.Second

// Options are Serve's settings.
type Options struct {
	// PythonWorkers is how many pre-started python interpreters wait for
	// a job (0: none, every python run starts python3).
	PythonWorkers int
	// Python is the interpreter of the workers ("" python3, found in
	// runtime.DefaultPath).
	Python string
	// RunsDir is the directory under which background logs must be
	// ("" DefaultRunsDir).
	RunsDir string
	// DrainTimeout is how long a foreground run's stdout and stderr stay
	// open after its main process exited while another foreground run
	// holds off the sweep (0: DefaultDrainTimeout).
	DrainTimeout time.Duration
	// Confine, when set, starts every run and python worker confined
	// away from the supervisor (JobConfinement); Serve refuses to serve
	// if the kernel refuses the confinement.
	Confine *JobConfinement
	// Logf, when set, receives what the supervisor has to say that is no
	// event (a worker that would not start); pid 1's stderr is the usual.
	Logf func(format string, args ...any)
}

const (
	// maxEnded is how many ended runs a list answer holds.
	maxEnded = 100
	// maxSweepPasses bounds a sweep against processes that fork as fast
	// as it kills.
	maxSweepPasses = 20
	// readyTimeout bounds the wait for the first python workers (ready
	// event) and for fresh ones (reseeded).
	readyTimeout = 30 * time.Second
)

// server is the state of one Serve or ServeListener, which outlives the
// connections that carry its requests and events (conn.go).
type server struct {
	opts Options
	self int
	cwd  string

	mu       sync.Mutex
	ctrl     *conn       // the connection in control: exits go to it
	byPID    map[int]any // *run or *worker: who gets the pid's exit status
	runs     map[string]*run
	ended    []RunStatus
	activeFG int // foreground runs whose main process still runs
	pool     pool

	// shutdownAsked, made by ServeListener, is closed once a shutdown was
	// asked for; nil when serving one connection (Serve).
	shutdownAsked chan struct{}
	shutdownOnce  sync.Once
}

// run is a live run.
type run struct {
	id         string
	pid        int
	background bool
	started    time.Time
	announced  chan struct{} // closed once started was sent
	outputs    []*os.File    // a foreground run's stdout, stderr read ends
	readers    sync.WaitGroup
	stdin      *stdinFeed
	mainExited bool
	onEnd      func() // after the exit was sent
	owner      *conn  // who started it, set before announced is closed
	reason     string // why the supervisor killed it, if it did
}

// Serve is pid 1 of a session sandbox: it reads requests from in and
// writes events to out until in ends (the host closed it) or ctx is done,
// then kills every process it started and returns. It returns an error for
// a broken stream (a frame it cannot read, out failing).
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts Options) error {
	s, err := newServer(opts)
	if err != nil {
		return err
	}
	defer s.launch()()

	c := newConn(s, out, nil, "the host")
	s.mu.Lock()
	s.ctrl = c
	s.mu.Unlock()
	workers, pyErr := s.pool.waitReady(readyTimeout)
	c.send(Event{Ev: EvReady, PID: s.self, Workers: workers, Error: pyErr, Version: Version})

	reqErr := make(chan error, 1)
	go func() { reqErr <- c.readRequests(in) }()
	select {
	case <-ctx.Done():
		return nil
	case <-c.dead:
		return fmt.Errorf("supervisor: write to the host: %w", c.err())
	case err := <-reqErr:
		return err
	}
}

// newServer is a server with opts' defaults filled in; launch sets it going.
func newServer(opts Options) (*server, error) {
	if opts.Python == "" {
		opts.Python = "python3"
	}
	if opts.RunsDir == "" {
		opts.RunsDir = DefaultRunsDir
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("supervisor: working directory: %w", err)
	}
	if c := opts.Confine; c != nil {
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("supervisor: %w", err)
		}
		if err := c.ownWorkDir(); err != nil {
			return nil, fmt.Errorf("supervisor: %w", err)
		}
	}
	return &server{
		opts:  opts,
		self:  os.Getpid(),
		cwd:   cwd,
		byPID: map[int]any{},
		runs:  map[string]*run{},
	}, nil
}

// launch makes the process the reaper of what it starts and starts the
// python workers; the function it returns kills everything the server
// started and undoes the rest. One server per process: its reaper waits
// for every child.
func (s *server) launch() (stop func()) {
	// As pid 1 it is every orphan's parent anyway; natively it becomes so.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	// Runs have its uid, and a process of the same uid may open another's
	// /proc/PID/fd and ptrace it, unless that one is not dumpable: so no
	// run can write on the host's pipes or take over the supervisor.
	// (Every run it starts execs, which makes the run dumpable again.)
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)

	// The signals a run may send pid 1 (same uid) that would end a Go
	// program are taken and dropped: the host ends the sandbox, nothing
	// inside it does. Handled, not ignored: an ignored signal stays
	// ignored across exec in the runs, a handled one is reset. SIGPIPE
	// handled makes a write to a host that went away an error instead of
	// the end of pid 1.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGABRT,
		syscall.SIGTRAP, syscall.SIGPIPE, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	reaperDone := make(chan struct{})
	stopReaper := make(chan struct{})
	go func() {
		defer close(reaperDone)
		for {
			s.reap()
			select {
			case <-chld:
			case <-sigs:
			case <-stopReaper:
				return
			}
		}
	}()
	s.pool.init(s)
	return func() {
		s.shutdown()
		close(stopReaper)
		<-reaperDone
		signal.Stop(chld)
		signal.Stop(sigs)
	}
}

// readRequests handles c's requests until in ends.
func (c *conn) readRequests(in io.Reader) error {
	for {
		b, err := ReadFrame(in)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			c.send(Event{Ev: EvError, Error: err.Error()})
			return fmt.Errorf("supervisor: read request: %w", err)
		}
		req, err := DecodeRequest(b)
		if err != nil {
			// The frame was whole, so the stream is still in step: say
			// what was wrong with it (to its Seq if that much parses).
			var seq struct {
				Seq uint64 `json:"seq"`
			}
			_ = json.Unmarshal(b, &seq)
			c.send(Event{Ev: EvError, Seq: seq.Seq, Error: err.Error()})
			continue
		}
		c.s.handle(c, req)
	}
}

// handle does what req of connection c asks and answers on c.
func (s *server) handle(c *conn, req Request) {
	s.mu.Lock()
	inControl := s.ctrl == c
	s.mu.Unlock()
	if !inControl {
		c.send(Event{Ev: EvError, Seq: req.Seq, ID: req.ID, Error: "this connection no longer controls the supervisor: another one took over"})
		return
	}
	switch req.Op {
	case OpShutdown:
		if s.shutdownAsked == nil {
			c.send(Event{Ev: EvError, Seq: req.Seq, Error: "shutdown is for a listening supervisor; this one ends with its connection"})
			return
		}
		c.send(Event{Ev: EvShutdown, Seq: req.Seq})
		s.shutdownOnce.Do(func() { close(s.shutdownAsked) })
	case OpPing:
		n, why := s.pool.status()
		c.send(Event{Ev: EvPong, Seq: req.Seq, PID: s.self, Workers: n, Error: why, Version: Version})
	case OpList:
		c.send(Event{Ev: EvRuns, Seq: req.Seq, Runs: s.list()})
	case OpReseed:
		s.pool.reseed()
		go func() {
			n, _ := s.pool.waitReady(readyTimeout)
			c.send(Event{Ev: EvReseeded, Seq: req.Seq, Workers: n})
		}()
	case OpSignal:
		if err := s.signal(req.ID, req.Signal); err != nil {
			c.send(Event{Ev: EvError, Seq: req.Seq, ID: req.ID, Error: err.Error()})
			return
		}
		c.send(Event{Ev: EvSignaled, Seq: req.Seq, ID: req.ID})
	case OpStdin:
		var feed *stdinFeed
		s.mu.Lock()
		if r := s.runs[req.ID]; r != nil {
			feed = r.stdin
		}
		s.mu.Unlock()
		if feed == nil {
			c.send(Event{Ev: EvError, Seq: req.Seq, ID: req.ID, Error: fmt.Sprintf("stdin for run %q: no such live run", req.ID)})
			return
		}
		feed.add(req.Stdin, !req.StdinMore)
	case OpPut, OpPutData, OpCollect, OpClear:
		c.handleFile(req) // files.go
	case OpRun:
		if req.Python {
			go s.startRun(c, req) // it may wait for a python worker
		} else {
			s.startRun(c, req)
		}
	}
}

// startRun starts req of connection c and says so on c. A foreground run
// whose connection ended meanwhile is killed: its caller is gone.
func (s *server) startRun(c *conn, req Request) {
	r, err := s.start(req)
	if err != nil {
		c.send(Event{Ev: EvStartFailed, Seq: req.Seq, ID: req.ID, Error: err.Error()})
		return
	}
	s.mu.Lock()
	r.owner = c
	if c.gone != "" && !r.background && !r.mainExited {
		s.killOrphanLocked(r, c.gone)
	}
	s.mu.Unlock()
	c.send(Event{Ev: EvStarted, Seq: req.Seq, ID: r.id, PID: r.pid})
	close(r.announced)
}

// send writes ev to the connection in control, if there is one: what no
// request asked for (an exit) goes to whoever controls the supervisor
// now.
func (s *server) send(ev Event) {
	s.mu.Lock()
	c := s.ctrl
	s.mu.Unlock()
	if c != nil {
		c.send(ev)
	}
}

func (s *server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

// start starts a run: on a python worker when it can, else its program.
func (s *server) start(req Request) (*run, error) {
	if req.Cwd != "" {
		if fi, err := os.Stat(req.Cwd); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("working directory %s: not a directory the run can use", req.Cwd)
		}
	}
	if req.Background {
		if err := s.checkLog(req.Log); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	_, inUse := s.runs[req.ID]
	s.mu.Unlock()
	if inUse {
		return nil, fmt.Errorf("run id %q is in use by a live run", req.ID)
	}
	path, err := lookPath(req.Argv[0], envPath(req.Env))
	if err != nil {
		return nil, err
	}
	if req.Python && !req.Background && len(req.Argv) >= 2 && !strings.HasPrefix(req.Argv[1], "-") {
		if r, ok, err := s.pool.run(req, path); ok || err != nil {
			return r, err
		}
	}
	return s.startProgram(req, path)
}

// checkLog holds a background log to the runs directory.
func (s *server) checkLog(log string) error {
	if log == "" || !filepath.IsAbs(log) || filepath.Clean(log) != log || !strings.HasPrefix(log, s.opts.RunsDir+"/") {
		return fmt.Errorf("background log %q: must be a clean absolute path under %s", log, s.opts.RunsDir)
	}
	return nil
}

// startProgram fork+execs the run's program in a session of its own.
func (s *server) startProgram(req Request, path string) (*run, error) {
	r := &run{id: req.ID, background: req.Background, announced: make(chan struct{})}
	var child [3]*os.File // stdin, stdout, stderr of the child
	var parent []*os.File // our ends
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	child[0], parent = inR, append(parent, inW)
	if req.Background {
		f, err := s.openLog(req.Log)
		if err != nil {
			closeAll(append(parent, child[:]...))
			return nil, err
		}
		child[1], child[2] = f, f
	} else {
		for i := 1; i <= 2; i++ {
			pr, pw, err := os.Pipe()
			if err != nil {
				closeAll(append(parent, child[:]...))
				return nil, fmt.Errorf("output pipe: %w", err)
			}
			child[i], parent = pw, append(parent, pr)
			r.outputs = append(r.outputs, pr)
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   req.Cwd,
		Env:   req.Env,
		Files: []uintptr{child[0].Fd(), child[1].Fd(), child[2].Fd()},
		Sys:   s.sysProcAttr(),
	}
	s.mu.Lock()
	if s.runs[req.ID] != nil {
		s.mu.Unlock()
		closeAll(append(parent, child[:]...))
		return nil, fmt.Errorf("run id %q is in use by a live run", req.ID)
	}
	pid, err := syscall.ForkExec(path, req.Argv, attr)
	if err == nil {
		r.pid, r.started = pid, time.Now()
		r.stdin = newStdinFeed(inW, req.Stdin, !req.StdinMore)
		s.register(r)
	}
	s.mu.Unlock()
	child[1].Close()
	if child[2] != child[1] {
		child[2].Close()
	}
	child[0].Close()
	if err != nil {
		closeAll(parent)
		return nil, s.startError(req.Argv[0], path, err)
	}
	for i, f := range r.outputs {
		s.relay(r, f, []string{StreamStdout, StreamStderr}[i], nil)
	}
	return r, nil
}

// register makes r live; s.mu is held.
func (s *server) register(r *run) {
	s.runs[r.id] = r
	s.byPID[r.pid] = r
	if !r.background {
		s.activeFG++
	}
}

// relay sends what f yields as output events of r, prefix first.
func (s *server) relay(r *run, f *os.File, stream string, prefix []byte) {
	r.readers.Add(1)
	go func() {
		defer r.readers.Done()
		defer f.Close()
		<-r.announced
		for len(prefix) > 0 {
			n := min(len(prefix), OutputChunk)
			r.owner.send(Event{Ev: EvOutput, ID: r.id, Stream: stream, Data: prefix[:n]})
			prefix = prefix[n:]
		}
		buf := make([]byte, OutputChunk)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				r.owner.send(Event{Ev: EvOutput, ID: r.id, Stream: stream, Data: buf[:n]}) // send encodes it before returning
			}
			if err != nil {
				return
			}
		}
	}()
}

// startError says why a program did not start, in words a model can act on.
func startError(name, path string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%s: no such file (or its #! interpreter is missing)", path)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: permission denied (not executable, or on a noexec mount)", path)
	case errors.Is(err, syscall.ENOEXEC):
		return fmt.Errorf("%s: not an executable format (a script needs a #! line)", path)
	}
	return fmt.Errorf("start %s: %w", name, err)
}

// lookPath finds name as execvp would in the run's PATH.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", startError(name, name, err)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: no such file in PATH (%s): is it installed in this image?", name, path)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return syscall.EACCES
	}
	if fi.Mode()&0o111 == 0 {
		return syscall.EACCES
	}
	return nil
}

// envPath is PATH of env, or runtime.DefaultPath without one.
func envPath(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	return runtime.DefaultPath
}

// reap collects every exit status there is and hands it on.
func (s *server) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		s.exited(pid, ws)
	}
}

// exited handles the end of process pid.
func (s *server) exited(pid int, ws unix.WaitStatus) {
	s.mu.Lock()
	owner := s.byPID[pid]
	delete(s.byPID, pid)
	switch o := owner.(type) {
	case *run:
		s.mainEnded(o, exitOf(ws))
	case *worker:
		s.pool.died(o)
		s.mu.Unlock()
	default:
		s.mu.Unlock() // an orphan
	}
}

// awaitStatus reads the exit status a python worker reports for its run
// just before it exits, so that the run ends without waiting for the
// process's teardown; a worker that ends another way (a signal, a crash)
// reports nothing, and its reaping ends the run.
func (s *server) awaitStatus(r *run, status *os.File) {
	defer status.Close()
	var b [1]byte
	if n, _ := status.Read(b[:]); n != 1 {
		return
	}
	s.mu.Lock()
	if s.byPID[r.pid] != r {
		s.mu.Unlock() // reaped already
		return
	}
	// Its process is now an orphan to the reaper.
	delete(s.byPID, r.pid)
	s.mainEnded(r, Exit{Code: int(b[0])})
}

// mainEnded ends run r whose main process ended with e: its process group
// is killed, the leftovers of ended runs are swept, and its exit is sent
// once its output is. s.mu is held, and released.
func (s *server) mainEnded(r *run, e Exit) {
	r.mainExited = true
	if !r.background {
		s.activeFG--
	}
	_ = unix.Kill(-r.pid, unix.SIGKILL)
	sweep := s.activeFG == 0
	s.mu.Unlock()
	if sweep {
		s.sweep(r.pid)
	}
	go s.finish(r, e)
}

// finish sends r's exit once its output is all sent.
func (s *server) finish(r *run, e Exit) {
	<-r.announced
	if !r.background {
		drained := make(chan struct{})
		go func() { r.readers.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(s.opts.DrainTimeout):
			for _, f := range r.outputs {
				f.Close()
			}
			<-drained
		}
	}
	if r.stdin != nil {
		r.stdin.stop()
	}
	s.mu.Lock()
	delete(s.runs, r.id)
	s.ended = append(s.ended, RunStatus{ID: r.id, PID: r.pid, Background: r.background, Started: r.started, Ended: time.Now(), Exit: &e, Reason: r.reason})
	if len(s.ended) > maxEnded {
		s.ended = s.ended[len(s.ended)-maxEnded:]
	}
	s.mu.Unlock()
	s.send(Event{Ev: EvExit, ID: r.id, Code: e.Code, Signal: e.Signal})
	if r.onEnd != nil {
		r.onEnd()
	}
}

// exitOf is a wait status as a shell reports it.
func exitOf(ws unix.WaitStatus) Exit {
	if ws.Signaled() {
		return Exit{Code: 128 + int(ws.Signal()), Signal: unix.SignalName(ws.Signal())}
	}
	return Exit{Code: ws.ExitStatus()}
}

// signal sends sig to the process group of live run id.
func (s *server) signal(id string, sig int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[id]
	if r == nil {
		return fmt.Errorf("signal run %q: no such run", id)
	}
	if r.mainExited {
		return fmt.Errorf("signal run %q: it has ended", id)
	}
	if sig <= 0 || sig >= 65 {
		return fmt.Errorf("signal run %q: %d is no signal", id, sig)
	}
	if err := unix.Kill(-r.pid, syscall.Signal(sig)); err != nil {
		return fmt.Errorf("signal run %q: %w", id, err)
	}
	return nil
}

// list is every live run and the last ended ones.
func (s *server) list() []RunStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RunStatus, 0, len(s.runs)+len(s.ended))
	for _, r := range s.runs {
		if !r.mainExited {
			out = append(out, RunStatus{ID: r.id, PID: r.pid, Background: r.background, Started: r.started, Running: true})
		}
	}
	return append(out, s.ended...)
}

// shutdown kills everything Serve started (the host is gone).
func (s *server) shutdown() {
	s.mu.Lock()
	for _, r := range s.runs {
		_ = unix.Kill(-r.pid, unix.SIGKILL)
	}
	s.pool.stop()
	s.mu.Unlock()
	s.killLeftovers(nil)
}

// sweep kills the leftovers of ended runs, unless a foreground run is
// active (its processes are its own until it ends); killed is a process
// just sent SIGKILL, which need not be sent it again.
func (s *server) sweep(killed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.activeFG > 0 {
		return
	}
	keep := map[int]bool{}
	for _, r := range s.runs {
		if r.background && !r.mainExited {
			keep[r.pid] = true // its session id: it called setsid
		}
	}
	for _, w := range s.pool.idle {
		keep[w.pid] = true
	}
	s.killLeftovers(keep, killed)
}

// killLeftovers SIGKILLs every process (as pid 1) or every descendant
// (natively) whose session is not in keep, pass after pass until one
// finds none it has not sent SIGKILL already (one that was sent it dies
// without running again; one it forked first is new to the next pass).
// killed are processes sent SIGKILL before.
func (s *server) killLeftovers(keep map[int]bool, killed ...int) {
	sent := map[int]bool{}
	for _, pid := range killed {
		sent[pid] = true
	}
	for pass := 0; pass < maxSweepPasses; pass++ {
		procs, err := process.ReadProcs()
		if err != nil {
			s.logf("supervisor: sweep: %v", err)
			return
		}
		mine := process.Descendants(procs, s.self)
		n := 0
		for _, p := range procs {
			if p.PID == s.self || p.Gone() || keep[p.SID] || sent[p.PID] {
				continue
			}
			if s.self != 1 && !mine[p.PID] {
				continue
			}
			if unix.Kill(p.PID, unix.SIGKILL) == nil {
				sent[p.PID] = true
				n++
			}
		}
		if n == 0 {
			return
		}
	}
}

// stdinFeed writes a run's stdin in order without ever blocking the
// request loop, and closes it after the last part.
type stdinFeed struct {
	w      *os.File
	mu     sync.Mutex
	cond   *sync.Cond
	parts  [][]byte
	last   bool
	closed bool
}

func newStdinFeed(w *os.File, first []byte, last bool) *stdinFeed {
	f := &stdinFeed{w: w}
	f.cond = sync.NewCond(&f.mu)
	f.add(first, last)
	go f.write(w)
	return f
}

func (f *stdinFeed) add(b []byte, last bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last || f.closed {
		return
	}
	if len(b) > 0 {
		f.parts = append(f.parts, b)
	}
	f.last = last
	f.cond.Signal()
}

// stop drops what is left (the run ended) and ends a write that blocks.
func (f *stdinFeed) stop() {
	f.mu.Lock()
	f.closed, f.parts = true, nil
	f.cond.Signal()
	f.mu.Unlock()
	f.w.Close()
}

func (f *stdinFeed) write(w *os.File) {
	defer w.Close()
	broken := false
	for {
		f.mu.Lock()
		for len(f.parts) == 0 && !f.last && !f.closed {
			f.cond.Wait()
		}
		if f.closed || (len(f.parts) == 0 && f.last) {
			f.mu.Unlock()
			return
		}
		b := f.parts[0]
		f.parts = f.parts[1:]
		f.mu.Unlock()
		if !broken {
			// A run that stops reading its stdin gets EPIPE; what is
			// left is not for anyone.
			if _, err := w.Write(b); err != nil {
				broken = true
			}
		}
	}
}
