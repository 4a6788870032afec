package api

import "time"

// Methods that follow background runs (runs started with background: true
// in a session's sandbox).
const (
	MethodRunsList   = "runs.list"
	MethodRunsLogs   = "runs.logs"
	MethodRunsWait   = "runs.wait"
	MethodRunsSignal = "runs.signal"
)

// Background run states.
const (
	RunRunning = "running"
	RunExited  = "exited"
)

// BackgroundRun is a background run as runs.* report it.
type BackgroundRun struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
	Skill     string `json:"skill,omitempty"`
	Path      string `json:"path,omitempty"`
	State     string `json:"state"` // RunRunning or RunExited
	// Paused says its sandbox is checkpointed (sessions.pause, idle, a
	// daemon restart): it runs on when the session's next call resumes it.
	Paused         bool      `json:"paused,omitempty"`
	PID            int       `json:"pid,omitempty"`
	Started        time.Time `json:"started"`
	SessionSandbox string    `json:"session_sandbox"`
	// Log is the run's stdout and stderr, a file in the sandbox's /work
	// (read it with runs.logs, by offset).
	Log string `json:"log"`
	// ExitCode and Signal once it ended (ExitCode as a shell reports it:
	// 128+n after signal n).
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
}

// RunsListParams is runs.list's request: the session's background runs.
type RunsListParams struct {
	SessionID string `json:"session_id"`
}

// RunsListResult is runs.list's result, oldest first.
type RunsListResult struct {
	Runs []BackgroundRun `json:"runs"`
}

// RunLogsParams is runs.logs's request: up to Length bytes (default and
// at most 1 MiB) of the run's log from Offset.
type RunLogsParams struct {
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
}

// RunLogsResult is runs.logs's result. Data is Encoding "utf-8" when the
// bytes are valid UTF-8, else "base64". NextOffset is where the next read
// starts; Size is the log's size now; EOF says the run has ended and
// nothing is left past NextOffset.
type RunLogsResult struct {
	RunID      string `json:"run_id"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	Size       int64  `json:"size"`
	Encoding   string `json:"encoding"`
	Data       string `json:"data"`
	State      string `json:"state"`
	EOF        bool   `json:"eof"`
}

// RunWaitParams is runs.wait's request: wait until the run ended, at most
// TimeoutMS (default 30 s, at most 10 min).
type RunWaitParams struct {
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

// RunSignalParams is runs.signal's request: send Signal (TERM, INT, HUP,
// KILL, USR1, USR2, QUIT, STOP, CONT; "SIG" prefix allowed; default TERM)
// to every process of the background run.
type RunSignalParams struct {
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
	Signal    string `json:"signal,omitempty"`
}

// Methods of sessions that live (isolation = "session").
const (
	MethodSessionsPause  = "sessions.pause"
	MethodSessionsResume = "sessions.resume"
	MethodSessionsFork   = "sessions.fork"
)

// PausedSandbox is a session sandbox put into a checkpoint.
type PausedSandbox struct {
	Sandbox    string `json:"sandbox"`
	Checkpoint string `json:"checkpoint"`
	// Digest is the checkpoint manifest's digest, as audited.
	Digest     string `json:"digest"`
	Bytes      int64  `json:"bytes"`
	DurationMS int64  `json:"duration_ms"`
}

// PauseSessionResult is sessions.pause's result: the session's sandboxes
// are checkpointed to disk (memory, processes, /work) and stopped; its
// next run (or sessions.resume) restores them.
type PauseSessionResult struct {
	SessionID string          `json:"session_id"`
	Sandboxes []PausedSandbox `json:"sandboxes"`
}

// ResumeSessionParams is sessions.resume's request: restore the session's
// paused sandboxes now, or, with Fresh, discard them (their processes and
// memory are lost) so that its next run starts a new sandbox; Fresh is
// how a caller agrees to that when a checkpoint cannot be restored any
// more (another runsc build, a rebuilt image).
type ResumeSessionParams struct {
	SessionID string `json:"session_id"`
	Fresh     bool   `json:"fresh,omitempty"`
}

// ResumeSessionResult is sessions.resume's result.
type ResumeSessionResult struct {
	SessionID string   `json:"session_id"`
	Sandboxes []string `json:"sandboxes"`
	Fresh     bool     `json:"fresh"`
}

// ForkSessionResult is sessions.fork's result: a new session of the
// caller's with the same active skills, its own copy of the workspace,
// and each sandbox restored from a checkpoint of the source's.
type ForkSessionResult struct {
	SessionID string   `json:"session_id"`
	From      string   `json:"from"`
	Sandboxes []string `json:"sandboxes"`
}
