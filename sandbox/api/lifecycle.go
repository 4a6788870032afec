package api

import (
	"encoding/json"
	"time"
)

// Method names of the skill lifecycle calls: activation, hooks' tool
// reports, proposals and the lock of approved versions.
const (
	MethodSkillsActivate   = "skills.activate"
	MethodSkillsPropose    = "skills.propose"
	MethodSkillsLock       = "skills.lock"
	MethodToolsReport      = "tools.report"
	MethodProposalsList    = "proposals.list"
	MethodProposalsShow    = "proposals.show"
	MethodProposalsApprove = "proposals.approve"
	MethodProposalsReject  = "proposals.reject"

	// ToolRenderCommand is the policy tool of a !`command` in a skill body:
	// each one runs in a sandbox only when policy allows (or confirms) it.
	ToolRenderCommand = "skills.render_command"
)

// Invocation kinds of ActivateParams.Invocation.
const (
	InvocationModel = "model" // the model chose the skill (default)
	InvocationUser  = "user"  // a person typed it (a slash command, an MCP prompt)
)

// CreateSessionParams is sessions.create's request: both optional. Agent
// names an agent block of the config whose uses_skills are loaded;
// UsesSkills loads more. The skills are loaded as skills.load would
// (policy, lock, audit); a skill that cannot be loaded fails the call.
type CreateSessionParams struct {
	Agent      string   `json:"agent,omitempty"`
	UsesSkills []string `json:"uses_skills,omitempty"`
}

// ActivateParams is skills.activate's request: load Name (if it is not
// loaded at its current version) and render its body for one invocation.
// Invocation says who invoked it (InvocationModel or InvocationUser), so
// disable-model-invocation and user-invocable are honoured.
// ConfirmationID is an approval for a !`command` that policy held.
type ActivateParams struct {
	SessionID      string `json:"session_id"`
	Name           string `json:"name"`
	Arguments      string `json:"arguments,omitempty"`
	Invocation     string `json:"invocation,omitempty"`
	ConfirmationID string `json:"confirmation_id,omitempty"`
}

// ActivateResult is skills.activate's result: the rendered body, the
// skill directory placeholders were replaced with (paths for skills.read
// and skills.run_script are relative to it), its estimated token count and
// what each !`command` did.
type ActivateResult struct {
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Digest      string            `json:"digest"`
	SkillDir    string            `json:"skill_dir"`
	Body        string            `json:"body"`
	Tokens      int               `json:"tokens"`
	Commands    []RenderedCommand `json:"commands,omitempty"`
}

// RenderedCommand is one !`command` of an activation. RunID is set when it
// ran; Error says why it did not run or failed (the body shows it too).
type RenderedCommand struct {
	Command        string `json:"command"`
	RunID          string `json:"run_id,omitempty"`
	ExitCode       int    `json:"exit_code"`
	Reason         string `json:"reason,omitempty"`
	Truncated      bool   `json:"truncated,omitempty"`
	Error          string `json:"error,omitempty"`
	ConfirmationID string `json:"confirmation_id,omitempty"`
	DecisionRule   string `json:"rule,omitempty"`
}

// ReportToolParams is tools.report's request: the host called Tool with
// Input and got Result; the active skills' PostToolUse hooks see it.
type ReportToolParams struct {
	SessionID string          `json:"session_id"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	// ConfirmationID(s): approvals for held hooks, as in CheckToolParams.
	ConfirmationID  string   `json:"confirmation_id,omitempty"`
	ConfirmationIDs []string `json:"confirmation_ids,omitempty"`
}

// ReportToolResult is tools.report's result: policy's decision on the
// reported call, as tools.check would give it, and what the hooks said.
// Block (with Reason) is a hook's request that the model be told to
// reconsider, or policy's deny of the call (then no hook runs).
type ReportToolResult struct {
	Decision string    `json:"decision,omitempty"`
	Rule     string    `json:"rule,omitempty"`
	Hooks    []HookRun `json:"hooks"`
	Block    bool      `json:"block,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

// HookRun is one hook that ran for a tools.check or tools.report.
type HookRun struct {
	Skill    string `json:"skill"`
	Event    string `json:"event"`
	Command  string `json:"command"`
	RunID    string `json:"run_id,omitempty"`
	ExitCode int    `json:"exit_code"`
	Reason   string `json:"reason,omitempty"`
	// Decision is what the hook's answer counted as: allow, deny, confirm
	// (or "" for a PostToolUse hook with nothing to say).
	Decision string `json:"decision,omitempty"`
	Message  string `json:"message,omitempty"`
	// ConfirmationID names the approval a hook policy holds is waiting
	// for (the hook did not run).
	ConfirmationID string `json:"confirmation_id,omitempty"`
}

// ProposeParams is skills.propose's request: Diff is a unified diff
// against the version of Skill loaded in the session.
type ProposeParams struct {
	SessionID     string `json:"session_id"`
	Skill         string `json:"skill"`
	Diff          string `json:"diff"`
	Justification string `json:"justification"`
	Evidence      string `json:"evidence,omitempty"`
}

// Proposal states.
const (
	ProposalPending  = "pending"
	ProposalApplied  = "applied"  // approved and written to the skill
	ProposalExported = "exported" // approved; the root is read-only, a patch file was written
	ProposalRejected = "rejected"
)

// Proposal is a change to a skill an agent proposed.
type Proposal struct {
	ID            string     `json:"id"`
	Skill         string     `json:"skill"`
	BaseDigest    string     `json:"base_digest"`
	Diff          string     `json:"diff,omitempty"`
	Files         []string   `json:"files"`
	Justification string     `json:"justification"`
	Evidence      string     `json:"evidence,omitempty"`
	State         string     `json:"state"`
	SessionID     string     `json:"session_id,omitempty"`
	ProposedBy    Peer       `json:"proposed_by"`
	Created       time.Time  `json:"created"`
	DecidedBy     *Peer      `json:"decided_by,omitempty"`
	DecidedAt     *time.Time `json:"decided_at,omitempty"`
	Note          string     `json:"note,omitempty"`
	NewDigest     string     `json:"new_digest,omitempty"`
	PatchFile     string     `json:"patch_file,omitempty"`
	LockUpdated   bool       `json:"lock_updated,omitempty"`
}

// ListProposalsParams filters proposals.list; both optional.
type ListProposalsParams struct {
	Skill string `json:"skill,omitempty"`
	State string `json:"state,omitempty"`
}

// ListProposalsResult is proposals.list's result (diffs left out; see
// proposals.show).
type ListProposalsResult struct {
	Proposals []*Proposal `json:"proposals"`
}

// ProposalIDParams names a proposal: proposals.show/approve/reject. Note
// is the approver's comment (a rejection's reason).
type ProposalIDParams struct {
	ID   string `json:"id"`
	Note string `json:"note,omitempty"`
}

// LockParams is skills.lock's request: pin the current versions of Names
// (all indexed skills when empty) in the lock file. Approvers only.
type LockParams struct {
	Names []string `json:"names,omitempty"`
}

// LockResult is skills.lock's result.
type LockResult struct {
	LockFile string        `json:"lock_file"`
	Pinned   []PinnedSkill `json:"pinned"`
}

// PinnedSkill is one skill version written to the lock.
type PinnedSkill struct {
	Name       string    `json:"name"`
	Digest     string    `json:"digest"`
	Previous   string    `json:"previous,omitempty"`
	ApprovedBy string    `json:"approved_by"`
	ApprovedAt time.Time `json:"approved_at"`
}
