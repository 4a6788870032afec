package supervisor

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/process"
)

// The python fast path. Forking a python inside gVisor costs 60-70 ms, as
// much as starting one; handing a job to an interpreter that already waits
// costs well under a millisecond. So the supervisor keeps pre-started
// python supervisors (runtime/process/supervisor.py, one job each), gives a
// python run to one of them, and starts its replacement right after, off
// the run's path.

// workerReady is what the python supervisor writes once it waits for its
// job (runtime/process/supervisor.py).
const workerReady = "skillbox-ready\n"

const (
	// maxWorkerFailures is how many workers in a row may die before they
	// are ready before the pool gives up (a broken or missing python).
	maxWorkerFailures = 3
	// workerBackoff is the pause before a failed worker's replacement, per
	// failure so far.
	workerBackoff = 200 * time.Millisecond
	// workerWait bounds how long a python run waits for a worker that is
	// starting before it starts python3 itself.
	workerWait = 3 * time.Second
)

// worker is one pre-started interpreter.
type worker struct {
	pid                   int
	stdin, stdout, stderr *os.File
	status                *os.File // the run's exit status, before its teardown
	ready, busy, retired  bool
	pending               []byte // stdout after the ready marker, the run's
}

// pool is the idle workers; its fields are guarded by server.mu.
type pool struct {
	s       *server
	want    int
	python  string // the interpreter, "" when there is none
	real    string // python with symlinks resolved
	err     string // why there are no workers
	idle    []*worker
	fails   int
	backoff bool          // a replacement is scheduled
	changed chan struct{} // closed and replaced on every change
}

// init starts the first workers.
func (p *pool) init(s *server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.s, p.want, p.changed = s, s.opts.PythonWorkers, make(chan struct{})
	if p.want <= 0 {
		return
	}
	path, err := lookPath(s.opts.Python, runtime.DefaultPath)
	if err != nil {
		p.err = "no python workers: " + err.Error()
		return
	}
	p.python = path
	if p.real, err = filepath.EvalSymlinks(path); err != nil {
		p.real = path
	}
	p.fillLocked()
}

func (p *pool) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// fillLocked starts workers up to want.
func (p *pool) fillLocked() {
	for p.python != "" && p.fails < maxWorkerFailures && len(p.idle) < p.want {
		if err := p.startLocked(); err != nil {
			p.err = "no python workers: " + err.Error()
			p.fails = maxWorkerFailures
		}
	}
	p.notifyLocked()
}

// refill is fillLocked after a job took a worker or one died.
func (p *pool) refill() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.backoff = false
	p.fillLocked()
}

// startLocked starts one worker in a session of its own, with an
// environment of its own (a job brings the run's).
func (p *pool) startLocked() error {
	ps, err := process.MakePipes(4)
	if err != nil {
		return err
	}
	attr := &syscall.ProcAttr{
		Dir: p.s.cwd,
		// No preload: a worker serves one run and the next one starts
		// right after, so its start is CPU every run pays (see
		// supervisor.py).
		Env:   []string{"PATH=" + runtime.DefaultPath, "HOME=" + runtime.HomeDir, "LANG=" + runtime.DefaultLang, "SKILLBOX_PRELOAD=0", "SKILLBOX_STATUS_FD=3"},
		Files: []uintptr{ps[0].R.Fd(), ps[1].W.Fd(), ps[2].W.Fd(), ps[3].W.Fd()},
		Sys:   p.s.sysProcAttr(),
	}
	pid, err := syscall.ForkExec(p.python, []string{p.python, "-c", process.SupervisorSource}, attr)
	ps[0].R.Close()
	ps[1].W.Close()
	ps[2].W.Close()
	ps[3].W.Close()
	if err != nil {
		ps[0].W.Close()
		ps[1].R.Close()
		ps[2].R.Close()
		ps[3].R.Close()
		return p.s.startError("python3", p.python, err)
	}
	w := &worker{pid: pid, stdin: ps[0].W, stdout: ps[1].R, stderr: ps[2].R, status: ps[3].R}
	p.s.byPID[pid] = w
	p.idle = append(p.idle, w)
	go p.awaitReady(w)
	return nil
}

// awaitReady reads w's stdout up to the ready marker.
func (p *pool) awaitReady(w *worker) {
	var buf []byte
	tmp := make([]byte, 512)
	for len(buf) < len(workerReady) {
		n, err := w.stdout.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			break
		}
	}
	if len(buf) >= len(workerReady) && string(buf[:len(workerReady)]) == workerReady {
		p.s.mu.Lock()
		w.ready, w.pending = true, buf[len(workerReady):]
		p.fails = 0
		p.notifyLocked()
		p.s.mu.Unlock()
		return
	}
	// It died or said something else: what it wrote on stderr is why.
	_ = unix.Kill(-w.pid, unix.SIGKILL)
	_ = w.stderr.SetReadDeadline(time.Now().Add(time.Second))
	msg, _ := io.ReadAll(io.LimitReader(w.stderr, 2048))
	w.stdout.Close()
	w.stderr.Close()
	why := strings.TrimSpace(string(bytes.ToValidUTF8(append(buf, msg...), nil)))
	if why == "" {
		why = "no output"
	}
	msgText := fmt.Sprintf("python worker %s exited before it was ready: %s", p.python, why)
	p.s.mu.Lock()
	retired := w.retired
	if !retired {
		p.err = msgText
	}
	p.s.mu.Unlock()
	if !retired {
		p.s.logf("supervisor: %s", msgText)
	}
}

// died handles the end of a worker no job took; s.mu is held.
func (p *pool) died(w *worker) {
	for i, x := range p.idle {
		if x == w {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			break
		}
	}
	w.stdin.Close()
	w.status.Close()
	if w.ready {
		w.stdout.Close()
		w.stderr.Close()
	}
	if w.retired {
		return
	}
	if !w.ready {
		p.fails++
	}
	if p.fails >= maxWorkerFailures {
		p.s.logf("supervisor: giving up on python workers after %d failures", p.fails)
		p.notifyLocked()
		return
	}
	p.backoff = true
	time.AfterFunc(time.Duration(p.fails)*workerBackoff, p.refill)
	p.notifyLocked()
}

// run gives req to an idle worker, if req's python (path) is the workers',
// waiting for one that is starting if none is ready. ok false: none took
// it, start the program instead.
func (p *pool) run(req Request, path string) (r *run, ok bool, err error) {
	if p.python == "" || !p.same(path) {
		return nil, false, nil
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = p.s.cwd
	}
	msg, err := process.SupervisorJobMessage(req.Argv, req.Env, cwd, nil)
	if err != nil {
		return nil, false, err
	}
	s := p.s
	var w *worker
	deadline := time.Now().Add(workerWait)
	for {
		s.mu.Lock()
		starting := false
		for i, x := range p.idle {
			if x.ready {
				w = x
				p.idle = append(p.idle[:i], p.idle[i+1:]...)
				break
			}
			starting = true
		}
		if w != nil {
			break
		}
		// A worker on its way is sooner ready than a python started now,
		// which would also compete with it for the CPU.
		ch := p.changed
		s.mu.Unlock()
		left := time.Until(deadline)
		if !starting || left <= 0 {
			return nil, false, nil
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
	if s.runs[req.ID] != nil {
		p.idle = append(p.idle, w)
		s.mu.Unlock()
		return nil, true, fmt.Errorf("run id %q is in use by a live run", req.ID)
	}
	w.busy = true
	r = &run{id: req.ID, pid: w.pid, started: time.Now(), announced: make(chan struct{}), outputs: []*os.File{w.stdout, w.stderr}}
	r.stdin = newStdinFeed(w.stdin, append(msg, req.Stdin...), !req.StdinMore)
	s.register(r) // the worker's exit status is the run's now
	// Starting a python costs a few hundred ms of CPU, which the run
	// would compete for: with another worker ready for the next job, the
	// replacement waits until this run ended.
	spare := false
	for _, x := range p.idle {
		spare = spare || x.ready
	}
	if spare {
		r.onEnd = p.refill
	}
	s.mu.Unlock()

	s.relay(r, w.stdout, StreamStdout, w.pending)
	s.relay(r, w.stderr, StreamStderr, nil)
	go s.awaitStatus(r, w.status)
	if !spare {
		go p.refill()
	}
	return r, true, nil
}

// same says whether path is the workers' interpreter.
func (p *pool) same(path string) bool {
	if path == p.python {
		return true
	}
	real, err := filepath.EvalSymlinks(path)
	return err == nil && real == p.real
}

// reseed replaces every worker no job took with a fresh one, so that none
// started before a checkpoint serves a job after its restore.
func (p *pool) reseed() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	for _, w := range p.idle {
		w.retired = true
		_ = unix.Kill(-w.pid, unix.SIGKILL)
	}
	p.idle = nil
	if p.fails >= maxWorkerFailures && p.python != "" {
		p.fails, p.err = 0, "" // a restore may have brought a working python
	}
	p.fillLocked()
}

// stop kills the workers for good; s.mu is held.
func (p *pool) stop() {
	for _, w := range p.idle {
		w.retired = true
		_ = unix.Kill(-w.pid, unix.SIGKILL)
	}
	p.idle, p.want = nil, 0
}

// status says how many workers are ready and, if none, why.
func (p *pool) status() (int, string) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	n := 0
	for _, w := range p.idle {
		if w.ready {
			n++
		}
	}
	if n > 0 {
		return n, ""
	}
	return 0, p.err
}

// waitReady waits until no worker is starting and no replacement is due,
// at most timeout, and says how many are ready and, if none, why.
func (p *pool) waitReady(timeout time.Duration) (int, string) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.s.mu.Lock()
		ready, starting := 0, 0
		for _, w := range p.idle {
			if w.ready {
				ready++
			} else {
				starting++
			}
		}
		due := p.backoff && p.fails < maxWorkerFailures
		ch, why := p.changed, p.err
		p.s.mu.Unlock()
		if ready > 0 {
			why = ""
		}
		if starting == 0 && !due {
			return ready, why
		}
		select {
		case <-ch:
		case <-deadline.C:
			return ready, why
		}
	}
}
