package api

// Method names of the tool calls, as sent on the wire.
const (
	MethodSessionsCreate       = "sessions.create"
	MethodSessionsClose        = "sessions.close"
	MethodSessionsInstructions = "sessions.instructions"
	MethodSkillsList           = "skills.list"
	MethodSkillsLoad           = "skills.load"
	MethodSkillsUnload         = "skills.unload"
	MethodSkillsRead           = "skills.read"
	MethodSkillsRunScript      = "skills.run_script"
	MethodSkillsRunCode        = "skills.run_code"
	MethodToolsCheck           = "tools.check"
	MethodSkillsCheck          = "skills.check"
	MethodConfirmationsList    = "confirmations.list"
	MethodConfirmationsApprove = "confirmations.approve"
	MethodConfirmationsDeny    = "confirmations.deny"
	MethodRunsCancel           = "runs.cancel"
)

// Load modes for LoadParams.Mode.
const (
	LoadReplace = "replace"
	LoadAdd     = "add"
)

// Decisions in CheckToolResult.Decision.
const (
	DecisionAllow   = "allow"
	DecisionDeny    = "deny"
	DecisionConfirm = "confirm"
)

// Languages of RunCodeParams.Language.
const (
	LanguagePython = "python"
	LanguageShell  = "shell"
	LanguageNode   = "node"
)
