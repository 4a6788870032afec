// Package supervisor is pid 1 of a session sandbox and the host's client of
// it. A session sandbox lives for many runs, and gVisor kills on restore
// every process that `runsc exec` started, so every run of the session is a
// child of this one long-lived process (the skillbox binary itself,
// `skillbox supervise`), which starts it in a session of its own, relays its
// output, reaps it, reports its exit and clears away what it left behind. It
// keeps Python interpreters pre-started, so a run does not pay for the
// start, and a worker reports its run's exit on a pipe of its own just
// before it exits, so a run ends without waiting for gVisor to tear the
// process down. After a restore the sandbox's fds 0/1/2 are new host pipes,
// so all control goes over stdin and stdout: length-prefixed JSON frames,
// requests in, events out (this file). Serve is the sandbox side, Client the
// host side. A pod's agent serves the same frames on a network listener
// (ServeListener, mutual TLS), its runs outliving any one connection, and
// the daemon dials it (Dial).
package supervisor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// MaxFrame is the largest frame either side sends or accepts. The host
// parses what comes out of a sandbox, which is untrusted: a longer length
// is a protocol error, never an allocation.
const MaxFrame = 1 << 20

// OutputChunk is the most output bytes one output event carries; StdinChunk
// the most stdin bytes one request carries (a Client sends more in stdin
// requests). Both keep a frame well under MaxFrame after base64.
const (
	OutputChunk = 64 << 10
	StdinChunk  = 256 << 10
)

// Version is the protocol's version, which the ready and pong events
// carry: a peer that speaks another one is refused before any request
// (Dial), since the two would misread each other.
const Version = 1

// ErrProtocol is the kind of every error about a malformed frame or
// message: the peer is broken or hostile, and the stream cannot be trusted
// any further.
var ErrProtocol = errors.New("supervisor protocol error")

// Ops of a Request.
const (
	OpRun    = "run"    // start a run
	OpStdin  = "stdin"  // more stdin for a run started with StdinMore
	OpSignal = "signal" // signal a run's process group
	OpList   = "list"   // list live and recently ended runs
	OpReseed = "reseed" // replace the idle python workers
	OpPing   = "ping"
)

// Request is what the host asks of the supervisor. Seq, when not 0, is
// echoed in the event that answers it.
type Request struct {
	Op  string `json:"op"`
	Seq uint64 `json:"seq,omitempty"`
	// ID names the run (run, stdin, signal).
	ID string `json:"id,omitempty"`
	// Argv, Env and Cwd are the run's program, its whole environment
	// (nothing is added) and its working directory ("" the supervisor's).
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	// Stdin is the run's stdin, or its first part when StdinMore is set:
	// then stdin requests follow, the last one with StdinMore false, and
	// stdin is closed after it.
	Stdin     []byte `json:"stdin,omitempty"`
	StdinMore bool   `json:"stdin_more,omitempty"`
	// Background runs write their stdout and stderr to Log, an absolute
	// path under the runs directory, and outlive the run that follows.
	Background bool   `json:"background,omitempty"`
	Log        string `json:"log,omitempty"`
	// Python marks argv as `python3 SCRIPT ARGS...`, which a pre-started
	// interpreter may run.
	Python bool `json:"python,omitempty"`
	// Signal is the signal number for OpSignal.
	Signal int `json:"signal,omitempty"`
}

// Events the supervisor sends.
const (
	EvReady       = "ready"        // once, at start (Hello)
	EvStarted     = "started"      // a run started (ID, PID)
	EvStartFailed = "start_failed" // a run could not start (ID, Error)
	EvOutput      = "output"       // output of a foreground run (ID, Stream, Data)
	EvExit        = "exit"         // a run ended (ID, Code, Signal)
	EvSignaled    = "signaled"     // a signal was sent (ID)
	EvRuns        = "runs"         // the answer to list (Runs)
	EvReseeded    = "reseeded"     // the idle workers were replaced
	EvPong        = "pong"         // the answer to ping (PID, Workers, Error)
	EvError       = "error"        // a request failed (ID when about a run, Error)
)

// Streams of an output event.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Event is what the supervisor tells the host. Seq is the Seq of the
// request it answers, 0 for events nobody asked for (ready, output, exit).
type Event struct {
	Ev     string `json:"ev"`
	Seq    uint64 `json:"seq,omitempty"`
	ID     string `json:"id,omitempty"`
	PID    int    `json:"pid,omitempty"`
	Stream string `json:"stream,omitempty"`
	Data   []byte `json:"data,omitempty"`
	// Code and Signal are an exit's (see Exit).
	Code   int         `json:"code,omitempty"`
	Signal string      `json:"signal,omitempty"`
	Error  string      `json:"error,omitempty"`
	Runs   []RunStatus `json:"runs,omitempty"`
	// Workers is the number of python workers ready (ready, reseeded,
	// pong), and Error on ready and pong why there is none.
	Workers int `json:"workers,omitempty"`
	// Version is the supervisor's protocol Version (ready, pong).
	Version int `json:"version,omitempty"`
}

// Exit is how a run ended, as a shell has it: Code is the exit status, or
// 128+n after signal n, whose name is then Signal ("SIGKILL").
type Exit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
}

// RunStatus is one run in a list answer: a live one (Running), or one of
// the last ended ones with its Exit.
type RunStatus struct {
	ID         string    `json:"id"`
	PID        int       `json:"pid"`
	Background bool      `json:"background,omitempty"`
	Started    time.Time `json:"started"`
	Running    bool      `json:"running,omitempty"`
	Ended      time.Time `json:"ended,omitempty"`
	Exit       *Exit     `json:"exit,omitempty"`
	// Reason says why the supervisor killed the run, if it did (the
	// connection that started it in the foreground ended).
	Reason string `json:"reason,omitempty"`
}

// Hello is what the ready and pong events say: the supervisor's pid, how
// many python workers wait for a job, why there are none if so, and the
// protocol Version it speaks (0: one from before versions).
type Hello struct {
	PID         int
	Workers     int
	PythonError string
	Version     int
}

// WriteFrame writes v as one frame: a 4-byte big-endian length, then its
// JSON.
func WriteFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("encode frame: %d bytes, at most %d", len(b), MaxFrame)
	}
	buf := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	_, err = w.Write(append(buf, b...))
	return err
}

// ReadFrame reads one frame's payload. io.EOF means the stream ended
// cleanly between frames; a frame cut short, or longer than MaxFrame, is an
// ErrProtocol error.
func ReadFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errkind.Errorf(ErrProtocol, "stream ended inside a frame header")
		}
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return nil, errkind.Errorf(ErrProtocol, "frame of %d bytes, at most %d (a corrupt or hostile stream)", n, MaxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errkind.Errorf(ErrProtocol, "stream ended inside a frame of %d bytes", n)
		}
		return nil, err
	}
	return b, nil
}

// DecodeEvent parses and checks one event's payload.
func DecodeEvent(b []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(b, &ev); err != nil {
		return Event{}, errkind.Errorf(ErrProtocol, "event is not JSON: %w", err)
	}
	switch ev.Ev {
	case EvReady, EvRuns, EvReseeded, EvPong, EvError:
	case EvStarted, EvStartFailed, EvExit, EvSignaled:
		if ev.ID == "" {
			return Event{}, errkind.Errorf(ErrProtocol, "%s event without a run id", ev.Ev)
		}
	case EvOutput:
		if ev.ID == "" || (ev.Stream != StreamStdout && ev.Stream != StreamStderr) {
			return Event{}, errkind.Errorf(ErrProtocol, "output event with run id %q and stream %q", ev.ID, ev.Stream)
		}
	default:
		return Event{}, errkind.Errorf(ErrProtocol, "unknown event %q", truncate(ev.Ev))
	}
	return ev, nil
}

// DecodeRequest parses and checks one request's payload.
func DecodeRequest(b []byte) (Request, error) {
	var req Request
	if err := json.Unmarshal(b, &req); err != nil {
		return Request{}, errkind.Errorf(ErrProtocol, "request is not JSON: %w", err)
	}
	switch req.Op {
	case OpList, OpReseed, OpPing:
	case OpRun:
		if req.ID == "" || len(req.Argv) == 0 || req.Argv[0] == "" {
			return Request{}, errkind.Errorf(ErrProtocol, "run request needs an id and a program (id %q, argv %q)", req.ID, req.Argv)
		}
	case OpStdin, OpSignal:
		if req.ID == "" {
			return Request{}, errkind.Errorf(ErrProtocol, "%s request without a run id", req.Op)
		}
	default:
		return Request{}, errkind.Errorf(ErrProtocol, "unknown op %q", truncate(req.Op))
	}
	return req, nil
}

// truncate keeps an untrusted string short in an error message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
