package api

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/skillbox/skillbox/runtime/outcome"
)

// The params and results of the tool calls (docs/PROTOCOL.md).
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
	// SkillMounts says where skills.run_code mounts each active skill.
	SkillMounts []MountedSkill `json:"skill_mounts,omitempty"`
}

// MountedSkill is a skill as skills.run_code mounts it: read-only at Path
// (/skills/NAME), which is on the module path, in the version Digest.
type MountedSkill struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// ListSkillsParams filters skills.list; both fields are optional.
type ListSkillsParams struct {
	SessionID string `json:"session_id,omitempty"`
	Query     string `json:"query,omitempty"`
}

// SkillInfo is one entry of skills.list (whose result is a bare array of
// them, sorted by name). Skills whose SKILL.md disables model invocation are
// listed with ModelInvocable false rather than hidden; UserInvocable is
// false for skills a person may not invoke (user-invocable: false), which
// are therefore not MCP prompts. Tags is always
// present on the wire ([] when the skill declares none).
type SkillInfo struct {
	Name           string   `json:"name"`
	Description    string   `json:"description"`
	Location       string   `json:"location"`
	Digest         string   `json:"digest"`
	Tags           []string `json:"tags"`
	ModelInvocable bool     `json:"model_invocable"`
	UserInvocable  bool     `json:"user_invocable"`
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
	// Dependencies are the packages the skill declares, when any.
	Dependencies *Dependencies `json:"dependencies,omitempty"`
}

// Dependencies is what a skill declares (requirements.txt, PEP 723 blocks,
// package.json, the config's packages) and the state of its layer.
type Dependencies struct {
	Python []string `json:"python,omitempty"`
	Npm    []string `json:"npm,omitempty"`
	Files  []string `json:"files,omitempty"`
	// State: "building" (started on load; a layer already built is found
	// at once), "not_built" (build_on_load is off), "invalid".
	State   string `json:"state,omitempty"`
	Message string `json:"message,omitempty"`
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

// File is one input entry for a run: a file, a directory or a symlink at
// Name, a relative path in the run's working directory (/work, the
// script's cwd) that may contain "/" (e.g. "unpacked/word/document.xml").
// Names are confined to the working directory: no "..", "." or empty
// components, not absolute, no control characters; directories a name
// needs are made. Type is FileTypeFile (the default when empty),
// FileTypeDir or FileTypeSymlink. A file's Content is base64 (standard
// encoding, padded); a symlink's Target is kept verbatim and never
// followed on the host, and no entry may lie under a symlink or file
// entry. Mode is the permission bits as a number (e.g. 420 for 0644; 0
// means 0644 for a file, 0755 for a directory). A bad entry is refused
// before anything runs, with an error naming it (files[i] "name").
type File struct {
	Name    string `json:"name"`
	Type    string `json:"type,omitempty"`
	Content string `json:"content,omitempty"`
	Target  string `json:"target,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
}

// The types of a File entry.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
)

// NewFile makes an input file of data.
func NewFile(name string, data []byte) File {
	return File{Name: name, Content: base64.StdEncoding.EncodeToString(data)}
}

// NewDir makes an input directory entry (an empty directory unless other
// entries lie under it).
func NewDir(name string) File {
	return File{Name: name, Type: FileTypeDir}
}

// NewSymlink makes an input symlink entry pointing at target.
func NewSymlink(name, target string) File {
	return File{Name: name, Type: FileTypeSymlink, Target: target}
}

// RunScriptParams is skills.run_script's request. Path is any file of the
// skill, relative to its root (e.g. "scripts/fill.py" or "core/gif.py"),
// unless policy restricts the directories scripts may be run from
// (script_dirs); the interpreter comes from its extension, never from the
// caller. The skill root and the script's directory are on the module path
// (PYTHONPATH, NODE_PATH). ConfirmationID repeats a call that policy held for approval.
// Stream asks for run.started, run.output and run.exited events while the
// script runs (JSON-RPC notifications; the result still carries the whole,
// capped output).
type RunScriptParams struct {
	RunInputs
	Skill   string `json:"skill,omitempty"`
	Path    string `json:"path"`
	Network bool   `json:"network,omitempty"`
}

// RunInputs are the inputs skills.run_script and skills.run_code share:
// the session, what the run is given, how it is followed and approved,
// and its workspace.
type RunInputs struct {
	SessionID      string            `json:"session_id"`
	Args           []string          `json:"args,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          string            `json:"stdin,omitempty"`
	TimeoutMS      int64             `json:"timeout_ms,omitempty"`
	Files          []File            `json:"files,omitempty"`
	Stream         bool              `json:"stream,omitempty"`
	ConfirmationID string            `json:"confirmation_id,omitempty"`
	// Background starts the run in the session's sandbox and returns at
	// once with its handle (RunScriptResult.Background); runs.* follow it.
	// Only for skills whose policy sets isolation = "session".
	Background bool `json:"background,omitempty"`
	WorkspaceParams
}

// WorkspaceParams give a run a workspace (see WorkspaceReport): Workspace
// is a host directory ("" for none); Inputs name what of it the run is
// given, as paths relative to it and globs ("**" for any depth; a
// directory brings everything under it); none: all of it. Over the
// socket the directory must belong to the caller and a policy rule must
// grant it (workspace, workspace_paths).
type WorkspaceParams struct {
	Workspace string   `json:"workspace,omitempty"`
	Inputs    []string `json:"inputs,omitempty"`
}

// RunCodeParams is skills.run_code's request: code the caller wrote, run in
// the same kind of sandbox as a script, with every active skill mounted
// read-only at /skills/NAME and on the module path. Language is
// LanguagePython, LanguageShell or LanguageNode; it picks the interpreter
// and image, as a script's extension does. Its result is a RunScriptResult
// whose Skills name the mounts and whose Path is the code's file in the
// sandbox.
type RunCodeParams struct {
	RunInputs
	Language string `json:"language"`
	Code     string `json:"code"`
}

// RunScriptResult is skills.run_script's (and skills.run_code's) result. A
// script that fails is still a result (ExitCode, Reason); errors are for
// runs that did not happen.
//
// Outputs are every regular file the script created or changed anywhere in
// its working directory, in path order, with paths relative to it (e.g.
// "outputs/report.pdf", "unpacked/ppt/slides/slide1.xml"). Symlinks and
// special files it left are never followed: they are named in
// OutputsSkipped with why. The output caps (limits output_files,
// output_bytes, output_file_bytes) are never silent: when one left files
// out, OutputsTruncated is true, OutputsTruncatedBy names the first cap
// hit ("output_files", "output_bytes" or "output_file_bytes"), OutputsOmittedFiles/Bytes count what was left out and
// OutputsSkipped names the files.
//
// Contents are inlined (base64) up to MaxInlineOutputBytes of file bytes
// per response, in path order; every output after the budget is used up
// still has its path, size and sha256 but no content, is marked
// ContentOmitted, and OutputsNotInlined counts those entries. A host that
// needs them runs the script again with fewer or smaller outputs (or uses
// `skillbox run --outputs DIR`, which has no such budget).
type RunScriptResult struct {
	RunID string `json:"run_id"`
	// Skill and SkillDigest name the skill version that ran (empty for a
	// skills.run_code run, whose mounted skills are in Skills).
	Skill       string `json:"skill"`
	SkillDigest string `json:"skill_digest"`
	Path        string `json:"path"`
	// Summary is how the run ended and what it left (exit code, signal,
	// reason, the caps hit, the inputs deleted, the runtime, what held
	// each limit, a warm start): the sandbox's result's, whole.
	outcome.Summary
	Stdout            string   `json:"stdout"`
	Stderr            string   `json:"stderr"`
	DurationMS        int64    `json:"duration_ms"`
	Outputs           []Output `json:"outputs"`
	OutputsNotInlined int      `json:"outputs_not_inlined,omitempty"`
	Image             string   `json:"image"`
	ImageDigest       string   `json:"image_digest"`
	// Network says the run had a network (egress rules); Limits are the
	// limits it ran under, in runtime.Limits' JSON form (every field, the
	// same names as the config's limits block).
	Network bool           `json:"network"`
	Limits  map[string]any `json:"limits,omitempty"`
	// ConfirmationID is the approval the run consumed, if it needed one.
	ConfirmationID string `json:"confirmation_id,omitempty"`
	// Skills are the skills a skills.run_code run mounted.
	Skills []MountedSkill `json:"skills,omitempty"`
	// DepsLayer is the digest of the dependency layer the run mounted.
	DepsLayer string `json:"deps_layer,omitempty"`
	// Hint says what to do about a failure skillbox recognises (a module
	// the image and layer lack).
	Hint string `json:"hint,omitempty"`
	// Warnings are what the run went without and why, one note each: the
	// declared packages no script imports that were not installed (no
	// package source), the image extras the source lacks that a script
	// imports.
	Warnings []string `json:"warnings,omitempty"`
	// Egress sums up a run's connections through the egress proxy (runs
	// whose policy lists egress destinations).
	Egress *EgressSummary `json:"egress,omitempty"`
	// Workspace is what the run took from its workspace and what came
	// back (runs with a workspace).
	Workspace *WorkspaceReport `json:"workspace,omitempty"`
	// Isolation is "session" for a run in its session's sandbox (which
	// SessionSandbox names); Background is set, and the exit fields
	// empty, for a run that was started in the background.
	Isolation      string         `json:"isolation,omitempty"`
	SessionSandbox string         `json:"session_sandbox,omitempty"`
	Background     *BackgroundRun `json:"background,omitempty"`
}

// Workspace kinds: a host directory (the CLI's --workdir, an MCP client's
// root, a directory policy grants a daemon caller) or the per-session
// directory the daemon keeps.
const (
	WorkspaceHost    = "host"
	WorkspaceSession = "session"
)

// Workspace modes: what policy lets a run do with its workspace.
const (
	WorkspaceNone  = "none"  // no workspace
	WorkspaceRead  = "read"  // files go in; nothing comes back
	WorkspaceWrite = "write" // files go in; the run's changes come back
)

// WorkspaceReport is what a run took from its workspace and what it did
// to it. A run sees copies of the workspace's files in its /work; after
// it, the files it created or changed (and, where policy allows, the ones
// it deleted) are applied back, each only if the host copy is still the
// one the run started from: otherwise it is a conflict and the host copy
// stays. Nothing is left out silently: every path not copied in or not
// applied back is in Refused or Conflicts with why.
type WorkspaceReport struct {
	Dir  string `json:"dir"`
	Kind string `json:"kind"` // WorkspaceHost or WorkspaceSession
	Mode string `json:"mode"` // WorkspaceRead or WorkspaceWrite
	// Rule names the policy rule that set the mode (or the default).
	Rule string `json:"rule"`
	// Inputs and InputBytes count the files copied in; Excluded the paths
	// an exclude pattern left out.
	Inputs     int   `json:"inputs"`
	InputBytes int64 `json:"input_bytes"`
	Excluded   int   `json:"excluded"`
	// Written and Deleted are the changes applied to the host copy.
	Written []WorkspaceChange `json:"written"`
	Deleted []WorkspaceChange `json:"deleted"`
	// Conflicts are changes not applied because the host copy changed
	// since the run started; Refused are paths not copied in or not
	// applied back for another reason (excluded, a symlink, a special
	// file, a cap, a deletion policy does not allow).
	Conflicts []WorkspaceFinding `json:"conflicts"`
	Refused   []WorkspaceFinding `json:"refused"`
	// NotApplied, when set, says why none of the run's changes were
	// applied (a read-only workspace, a run that did not end by itself).
	NotApplied string `json:"not_applied,omitempty"`
}

// WorkspaceChange is one change applied to a workspace.
type WorkspaceChange struct {
	Path   string `json:"path"`
	Before string `json:"sha256_before,omitempty"` // "": the file is new
	After  string `json:"sha256_after,omitempty"`  // "": the file was deleted
	Size   int64  `json:"size,omitempty"`
}

// WorkspaceFinding is a workspace path that was not copied in or not
// applied back, and why.
type WorkspaceFinding struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// EgressSummary counts a run's egress: allowed connections, refused
// attempts, bytes each way, and the cap it hit ("egress_connections",
// "egress_bytes_out"), if any. Each attempt is in the audit.
type EgressSummary struct {
	Connections int    `json:"connections"`
	Denied      int    `json:"denied"`
	BytesOut    int64  `json:"bytes_out"`
	BytesIn     int64  `json:"bytes_in"`
	LimitHit    string `json:"limit_hit,omitempty"`
}

// MaxInlineOutputBytes is the budget of output file bytes (before base64)
// one run result inlines; see RunScriptResult.
const MaxInlineOutputBytes = 64 << 20

// Output is a file the script created or changed in its working directory;
// Path is relative to it. Content is base64, absent when ContentOmitted
// (the response's inline budget was used up; Size and SHA256 still
// describe the file).
type Output struct {
	Path           string `json:"path"`
	Size           int64  `json:"size"`
	SHA256         string `json:"sha256"`
	Content        string `json:"content,omitempty"`
	ContentOmitted bool   `json:"content_omitted,omitempty"`
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
	// ConfirmationID and ConfirmationIDs are approvals for hooks that
	// policy holds for confirmation (a hook runs as a run of its skill);
	// each is used by the hook it was approved for.
	ConfirmationID  string   `json:"confirmation_id,omitempty"`
	ConfirmationIDs []string `json:"confirmation_ids,omitempty"`
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

// DetailLockDiff is the Details key of the unified diff of a skill's files
// against its locked version (up to 64 KiB): the console and
// confirmations.list show it whole; a host's approval prompt (MCP) names
// its size and where to read it.
const DetailLockDiff = "lock_diff"

// ConfirmationRequiredData is the data of a confirmation_required error: the
// host shows Reason to an approver and repeats the call with
// ConfirmationID once it is approved.
type ConfirmationRequiredData struct {
	ConfirmationID string `json:"confirmation_id"`
	Reason         string `json:"reason"`
	Rule           string `json:"rule"`
	Digest         string `json:"digest"`
}

// CheckSkillParams is skills.check's request: a skill by name.
type CheckSkillParams struct {
	Skill string `json:"skill"`
}

// CheckSkillResult is skills.check's result: every import and program the
// skill's scripts name, by file and line, resolved against the image each
// script runs in and the skill's dependency layer. Missing counts the
// findings whose State is "missing"; Skipped says which script families
// were not checked and why (an image not built yet).
type CheckSkillResult struct {
	Skill    string         `json:"skill"`
	Digest   string         `json:"digest"`
	Findings []CheckFinding `json:"findings"`
	Missing  int            `json:"missing"`
	Skipped  []string       `json:"skipped,omitempty"`
}

// CheckFinding is one import or program of one script line. Kind is
// "import" or "program"; State is "missing" or "satisfied"; By says what
// satisfies it ("stdlib", "builtin", "image", "layer", "skill",
// "declared"); Hint says how to provide a missing one.
type CheckFinding struct {
	File  string `json:"file"`
	Line  int    `json:"line"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	State string `json:"state"`
	By    string `json:"by,omitempty"`
	Hint  string `json:"hint,omitempty"`
}
