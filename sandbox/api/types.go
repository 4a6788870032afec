package api

import (
	"encoding/base64"
	"encoding/json"
	"time"
)

// The params and results of the tool calls (docs/ARCHITECTURE.md).
// JSON names are the protocol's and must not drift.

// SessionParams names a session: sessions.close, sessions.instructions.
type SessionParams struct {
	SessionID string `json:"session_id"`
}

// CreateSessionResult is sessions.create's result.
type CreateSessionResult struct {
	SessionID string `json:"session_id"`
}

// CloseSessionResult is sessions.close's result.
type CloseSessionResult struct {
	Closed bool `json:"closed"`
}

// InstructionsResult is sessions.instructions' result: the text to put in
// the host's next LLM call (the loading rule, <available_skills> and
// <active_skills> in load order), and its two rendered parts on their own.
type InstructionsResult struct {
	Instructions    string `json:"instructions"`
	AvailableSkills string `json:"available_skills,omitempty"`
	ActiveSkills    string `json:"active_skills,omitempty"`
}

// ListSkillsParams filters skills.list; both fields are optional.
type ListSkillsParams struct {
	SessionID string `json:"session_id,omitempty"`
	Query     string `json:"query,omitempty"`
}

// SkillInfo is one entry of skills.list (whose result is a bare array of
// them, sorted by name). Skills whose SKILL.md disables model invocation are
// listed with ModelInvocable false rather than hidden. Tags is always
// present on the wire ([] when the skill declares none).
type SkillInfo struct {
	Name           string   `json:"name"`
	Description    string   `json:"description"`
	Location       string   `json:"location"`
	Digest         string   `json:"digest"`
	Tags           []string `json:"tags"`
	ModelInvocable bool     `json:"model_invocable"`
	// Tokens estimates the entry's cost in <available_skills>
	// (skills.EstimateTokens); BodyTokens that of its SKILL.md body once loaded.
	Tokens     int `json:"tokens"`
	BodyTokens int `json:"body_tokens"`
}

// LoadParams is skills.load's request.
type LoadParams struct {
	SessionID string   `json:"session_id"`
	Names     []string `json:"names"`
	// Mode is LoadReplace (default) or LoadAdd.
	Mode string `json:"mode,omitempty"`
}

// UnloadParams is skills.unload's request: Names, or All.
type UnloadParams struct {
	SessionID string   `json:"session_id"`
	Names     []string `json:"names,omitempty"`
	All       bool     `json:"all,omitempty"`
}

// LoadResult is the receipt skills.load and skills.unload return: the active
// skills in load order, and hints (e.g. a loaded skill's unloaded requires).
type LoadResult struct {
	ActiveSkills []ActiveSkill `json:"active_skills"`
	Hints        []string      `json:"hints,omitempty"`
}

// ActiveSkill is one loaded skill in a receipt.
type ActiveSkill struct {
	Name       string         `json:"name"`
	Location   string         `json:"location"`
	RootDir    string         `json:"root_dir"`
	Digest     string         `json:"digest"`
	Properties map[string]any `json:"properties,omitempty"`
	// Tokens estimates the SKILL.md body's cost (skills.EstimateTokens).
	Tokens int `json:"tokens"`
}

// ReadParams is skills.read's request. Skill defaults to the most recently
// loaded skill; Offset and Length select a byte range.
type ReadParams struct {
	SessionID string `json:"session_id"`
	Skill     string `json:"skill,omitempty"`
	Path      string `json:"path"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
}

// ReadResult is skills.read's result. Content is text when Encoding is
// "utf-8" and base64 when it is "base64".
type ReadResult struct {
	Skill     string `json:"skill"`
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	Encoding  string `json:"encoding"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated"`
	// Tokens estimates the content's cost (skills.EstimateTokens of the
	// text; for base64 content, of the encoded text a model would see).
	Tokens int `json:"tokens"`
}

// File is an input file for a run; it lands in the run's working directory
// under Name. Content is base64 (standard encoding, padded).
type File struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// NewFile makes an input file of data.
func NewFile(name string, data []byte) File {
	return File{Name: name, Content: base64.StdEncoding.EncodeToString(data)}
}

// RunScriptParams is skills.run_script's request. Path lies under the
// skill's scripts/; the interpreter comes from its extension, never from the
// caller. ConfirmationID repeats a call that policy held for approval.
// Stream asks for run.started, run.output and run.exited events while the
// script runs (JSON-RPC notifications; the result still carries the whole,
// capped output).
type RunScriptParams struct {
	SessionID      string            `json:"session_id"`
	Skill          string            `json:"skill,omitempty"`
	Path           string            `json:"path"`
	Args           []string          `json:"args,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          string            `json:"stdin,omitempty"`
	TimeoutMS      int64             `json:"timeout_ms,omitempty"`
	Files          []File            `json:"files,omitempty"`
	Network        bool              `json:"network,omitempty"`
	Stream         bool              `json:"stream,omitempty"`
	ConfirmationID string            `json:"confirmation_id,omitempty"`
}

// RunCodeParams is skills.run_code's request: code the caller wrote, run in
// the same kind of sandbox as a script, with every active skill mounted
// read-only. Language is LanguagePython, LanguageShell or LanguageNode.
// Its result is a RunScriptResult.
type RunCodeParams struct {
	SessionID      string            `json:"session_id"`
	Language       string            `json:"language"`
	Code           string            `json:"code"`
	Args           []string          `json:"args,omitempty"`
	Files          []File            `json:"files,omitempty"`
	Stdin          string            `json:"stdin,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutMS      int64             `json:"timeout_ms,omitempty"`
	Stream         bool              `json:"stream,omitempty"`
	ConfirmationID string            `json:"confirmation_id,omitempty"`
}

// RunScriptResult is skills.run_script's (and skills.run_code's) result. A
// script that fails is still a result (ExitCode, Reason); errors are for
// runs that did not happen.
type RunScriptResult struct {
	RunID           string   `json:"run_id"`
	Path            string   `json:"path"`
	ExitCode        int      `json:"exit_code"`
	Signal          string   `json:"signal,omitempty"`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	StdoutTruncated bool     `json:"stdout_truncated"`
	StderrTruncated bool     `json:"stderr_truncated"`
	DurationMS      int64    `json:"duration_ms"`
	Reason          string   `json:"reason"`
	Outputs         []Output `json:"outputs,omitempty"`
	Image           string   `json:"image,omitempty"`
	ImageDigest     string   `json:"image_digest,omitempty"`
	Runtime         string   `json:"runtime,omitempty"`
}

// Output is a file the script wrote to its outputs folder. Content is base64.
type Output struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	Content   string `json:"content,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Data decodes an output file's content.
func (o Output) Data() ([]byte, error) {
	return base64.StdEncoding.DecodeString(o.Content)
}

// CancelRunParams is runs.cancel's request: stop run RunID (a run of the
// caller's own uid) now. The run's own call then returns its result with
// Reason "cancelled".
type CancelRunParams struct {
	RunID string `json:"run_id"`
}

// CancelRunResult is runs.cancel's result.
type CancelRunResult struct {
	RunID     string `json:"run_id"`
	Cancelled bool   `json:"cancelled"`
}

// CheckToolParams is tools.check's request: may the host call Tool (in the
// ecosystem's syntax, e.g. "Bash" or "skills.run_script") with Input now?
type CheckToolParams struct {
	SessionID string          `json:"session_id"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// CheckToolResult is tools.check's result.
type CheckToolResult struct {
	Decision string `json:"decision"`
	Rule     string `json:"rule"`
	Reason   string `json:"reason,omitempty"`
}

// ListConfirmationsParams filters confirmations.list; both are optional.
type ListConfirmationsParams struct {
	SessionID string `json:"session_id,omitempty"`
	State     string `json:"state,omitempty"`
}

// ListConfirmationsResult is confirmations.list's result.
type ListConfirmationsResult struct {
	Confirmations []*Confirmation `json:"confirmations"`
}

// ConfirmationIDParams names a confirmation: confirmations.approve and
// confirmations.deny.
type ConfirmationIDParams struct {
	ID string `json:"id"`
}

// ConfirmationState is where a confirmation is in its life. pending →
// approved → used, or pending → denied, or pending/approved → expired;
// denied, expired and used are final.
type ConfirmationState string

// Confirmation states.
const (
	ConfirmationPending  ConfirmationState = "pending"
	ConfirmationApproved ConfirmationState = "approved"
	ConfirmationDenied   ConfirmationState = "denied"
	ConfirmationExpired  ConfirmationState = "expired"
	ConfirmationUsed     ConfirmationState = "used"
)

// Final reports whether no further change of state is possible.
func (s ConfirmationState) Final() bool {
	return s == ConfirmationDenied || s == ConfirmationExpired || s == ConfirmationUsed
}

// Confirmation is one request for approval, as confirmations.* report it
// and as the store keeps it.
type Confirmation struct {
	ID        string            `json:"id"`
	SessionID string            `json:"session_id"`
	Digest    string            `json:"digest"`
	Reason    string            `json:"reason"`
	Rule      string            `json:"rule"`
	State     ConfirmationState `json:"state"`
	Created   time.Time         `json:"created"`
	Expires   time.Time         `json:"expires"`
	// RequestedBy is the uid that owns the session the run was asked in.
	RequestedBy uint32     `json:"requested_by"`
	DecidedBy   *Peer      `json:"decided_by,omitempty"`
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	UsedAt      *time.Time `json:"used_at,omitempty"`
	// Details is what an approver is shown besides Reason (skill, script,
	// args, ...).
	Details map[string]string `json:"details,omitempty"`
}

// ConfirmationRequiredData is the data of a confirmation_required error: the
// host shows Reason to an approver and repeats the call with
// ConfirmationID once it is approved.
type ConfirmationRequiredData struct {
	ConfirmationID string `json:"confirmation_id"`
	Reason         string `json:"reason"`
	Rule           string `json:"rule"`
	Digest         string `json:"digest"`
}
