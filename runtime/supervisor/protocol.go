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
	"github.com/skillbox/skillbox/runtime/tarstream"
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
	// OpShutdown ends a listening agent (ServeListener), its runs killed,
	// and the pod it is the process of with it.
	OpShutdown = "shutdown"
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

	// Files (put, put_data, collect, clear; see "Files" below).
	FileRequest
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
	EvShutdown    = "shutdown"     // the answer to shutdown, before the server ends
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

	// Files (put, collect_data, collected, cleared; see "Files" below).
	FileEvent
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
	case EvReady, EvRuns, EvReseeded, EvPong, EvShutdown, EvError:
	case EvStarted, EvStartFailed, EvExit, EvSignaled:
		if ev.ID == "" {
			return Event{}, errkind.Errorf(ErrProtocol, "%s event without a run id", ev.Ev)
		}
	case EvOutput:
		if ev.ID == "" || (ev.Stream != StreamStdout && ev.Stream != StreamStderr) {
			return Event{}, errkind.Errorf(ErrProtocol, "output event with run id %q and stream %q", ev.ID, ev.Stream)
		}
	case EvPut, EvCollectData, EvCollected, EvCleared:
		if err := checkFileEvent(ev); err != nil {
			return Event{}, err
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
	case OpList, OpReseed, OpPing, OpShutdown:
	case OpRun:
		if req.ID == "" || len(req.Argv) == 0 || req.Argv[0] == "" {
			return Request{}, errkind.Errorf(ErrProtocol, "run request needs an id and a program (id %q, argv %q)", req.ID, req.Argv)
		}
	case OpStdin, OpSignal:
		if req.ID == "" {
			return Request{}, errkind.Errorf(ErrProtocol, "%s request without a run id", req.Op)
		}
	case OpPut, OpPutData, OpCollect, OpClear:
		if err := checkFileRequest(req); err != nil {
			return Request{}, err
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

// ---- Files: put, collect, clear --------------------------------------
//
// A pod's agent has one connection and no shared directory with the
// host, so a run's inputs and a skill's files go in, and its workdir
// comes back, as tar streams in frames (served in files.go, asked for in
// files_client.go). Every path is a clean absolute directory under one of
// the agent's file roots (FileRoots).
//
//   - put: the request states the directory, the stream's Size and its
//     sha256 Digest up front and carries its first PutChunk bytes; while
//     More is set, put_data requests with the put's Seq carry the rest.
//     The agent extracts the stream strictly (tarstream.Extract) into a
//     staging directory and moves it into place only once the stream had
//     exactly Size bytes of that digest, then answers put (or error).
//   - collect: the agent answers with collect_data events of at most
//     OutputChunk bytes, the collect's Seq on each, carrying a tar stream
//     of the directory of at most MaxBytes bytes, then one collected
//     event: its Size and Digest, and Truncated (with Omitted, the first
//     entry left out) when the bound stopped it.
//   - clear: every entry in the directory is removed, the directory kept.

// Ops of the file requests.
const (
	OpPut     = "put"      // a tar stream into a directory, first part
	OpPutData = "put_data" // more of a put's stream (Seq: the put's)
	OpCollect = "collect"  // a tar stream of a directory back
	OpClear   = "clear"    // empty a directory
)

// Events of the file requests.
const (
	EvPut         = "put"          // a put's stream is in place (Entries, Size)
	EvCollectData = "collect_data" // part of a collect's stream (Data)
	EvCollected   = "collected"    // a collect's stream ended (Size, Digest, Truncated, Omitted, Notes)
	EvCleared     = "cleared"      // a directory was emptied (Entries: how many were removed)
)

// PutChunk is the most stream bytes one put or put_data request carries:
// a frame stays well under MaxFrame after base64.
const PutChunk = 256 << 10

// Bounds on what a file event or request may hold: an untrusted peer's
// paths, digests and notes are checked before they are used.
const (
	maxFileDirLen   = 4096
	maxFileNotes    = 101 // tarstream.MaxNotes and the count of the rest
	maxFileNoteLen  = 8192
	maxFileDigest   = 128
	maxFileOmitted  = 8192
	maxCollectBytes = 1 << 40
)

// FileRequest are a Request's fields for the file ops.
type FileRequest struct {
	// Dir is the directory put into, collected or cleared.
	Dir string `json:"dir,omitempty"`
	// Size and Digest ("sha256:HEX") are a put's whole stream's.
	Size   int64  `json:"size,omitempty"`
	Digest string `json:"digest,omitempty"`
	// ReadOnly puts files 0444 (0555 executable) and directories 0555,
	// owned by the agent: a skill's files, which the job must not change.
	ReadOnly bool `json:"read_only,omitempty"`
	// Data is a part of a put's stream; More says more parts follow.
	Data []byte `json:"data,omitempty"`
	More bool   `json:"more,omitempty"`
	// MaxBytes bounds a collect's stream.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// FileEvent are an Event's fields for the file ops.
type FileEvent struct {
	Size      int64    `json:"size,omitempty"`
	Entries   int      `json:"entries,omitempty"`
	Digest    string   `json:"digest,omitempty"`
	Truncated bool     `json:"truncated,omitempty"`
	Omitted   string   `json:"omitted,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// checkFileRequest checks a file request's fields (DecodeRequest).
func checkFileRequest(req Request) error {
	if req.Seq == 0 {
		return errkind.Errorf(ErrProtocol, "%s request without a seq", req.Op)
	}
	if len(req.Data) > PutChunk {
		return errkind.Errorf(ErrProtocol, "%s request carries %d bytes, at most %d", req.Op, len(req.Data), PutChunk)
	}
	if req.Op == OpPutData {
		return nil
	}
	if req.Dir == "" || len(req.Dir) > maxFileDirLen {
		return errkind.Errorf(ErrProtocol, "%s request needs a directory of at most %d bytes", req.Op, maxFileDirLen)
	}
	switch req.Op {
	case OpPut:
		if req.Size < 0 || int64(len(req.Data)) > req.Size {
			return errkind.Errorf(ErrProtocol, "put request of %d bytes carries %d", req.Size, len(req.Data))
		}
		if !tarstream.ValidDigest(req.Digest) {
			return errkind.Errorf(ErrProtocol, "put request's digest %q is not sha256:<64 hex digits>", truncate(req.Digest))
		}
	case OpCollect:
		if req.MaxBytes <= 0 || req.MaxBytes > maxCollectBytes {
			return errkind.Errorf(ErrProtocol, "collect request's bound of %d bytes is not in 1..%d", req.MaxBytes, int64(maxCollectBytes))
		}
	}
	return nil
}

// checkFileEvent checks a file event's fields (DecodeEvent).
func checkFileEvent(ev Event) error {
	switch {
	case ev.Seq == 0:
		return errkind.Errorf(ErrProtocol, "%s event without a seq", ev.Ev)
	case len(ev.Data) > OutputChunk:
		return errkind.Errorf(ErrProtocol, "%s event carries %d bytes, at most %d", ev.Ev, len(ev.Data), OutputChunk)
	case ev.Size < 0 || ev.Entries < 0:
		return errkind.Errorf(ErrProtocol, "%s event with size %d, entries %d", ev.Ev, ev.Size, ev.Entries)
	case len(ev.Digest) > maxFileDigest || len(ev.Omitted) > maxFileOmitted:
		return errkind.Errorf(ErrProtocol, "%s event with a digest of %d bytes, an omitted name of %d", ev.Ev, len(ev.Digest), len(ev.Omitted))
	case len(ev.Notes) > maxFileNotes:
		return errkind.Errorf(ErrProtocol, "%s event with %d notes, at most %d", ev.Ev, len(ev.Notes), maxFileNotes)
	}
	for _, n := range ev.Notes {
		if len(n) > maxFileNoteLen {
			return errkind.Errorf(ErrProtocol, "%s event with a note of %d bytes, at most %d", ev.Ev, len(n), maxFileNoteLen)
		}
	}
	return nil
}
