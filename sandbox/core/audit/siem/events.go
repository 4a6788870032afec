package siem

import "github.com/skillbox/skillbox/sandbox/core/audit"

// ocsfClass is one OCSF 1.3.0 event class.
type ocsfClass struct {
	UID          int
	Name         string
	CategoryUID  int
	CategoryName string
}

// The OCSF classes skillbox's events map to.
var (
	classBase         = ocsfClass{0, "Base Event", 0, "Uncategorized"}
	classProcess      = ocsfClass{1007, "Process Activity", 1, "System Activity"}
	classEventLog     = ocsfClass{1008, "Event Log Activity", 1, "System Activity"}
	classAuth         = ocsfClass{3002, "Authentication", 3, "Identity & Access Management"}
	classNetwork      = ocsfClass{4001, "Network Activity", 4, "Network Activity"}
	classAppLifecycle = ocsfClass{6002, "Application Lifecycle", 6, "Application Activity"}
	classAPI          = ocsfClass{6003, "API Activity", 6, "Application Activity"}
)

// OCSF activity ids used below (each class's own enum; 0 and 99 are common).
const (
	activityUnknown = 0
	activityOther   = 99
)

// mapping is where one audit event goes: its OCSF class and activity, and
// its ECS event.category and event.type.
type mapping struct {
	Class        ocsfClass
	Activity     int
	ActivityName string
	ECSCategory  []string
	ECSType      []string
}

// Events written outside package audit (named here as strings to keep this
// package free of the daemon's packages): sandbox/core/runner.EventDepsBuild,
// sandbox/core/service.EventProposal*, EventSkillLock, EventLockRefused,
// EventSkillActivate.
const (
	eventDepsBuild       = "deps.build"
	eventProposalCreate  = "proposal.create"
	eventProposalApprove = "proposal.approve"
	eventProposalReject  = "proposal.reject"
	eventSkillLock       = "skills.lock"
	eventSkillRefused    = "skills.refused"
	eventSkillActivate   = "skills.activate"
)

var (
	ecsAPI     = []string{"api"}
	ecsSession = []string{"session"}
	ecsConfig  = []string{"configuration"}
	ecsFile    = []string{"file"}
	ecsProcess = []string{"process"}
	ecsIAM     = []string{"iam"}
	ecsNetwork = []string{"network"}
	ecsAuth    = []string{"authentication"}
	ecsHost    = []string{"host"}
	ecsPackage = []string{"package"}
)

func apiCall(activity int, name string, cat []string, typ ...string) mapping {
	return mapping{classAPI, activity, name, cat, typ}
}

// mappings is the one table of where each known event goes. Activity ids:
// API Activity 1 Create, 2 Read, 3 Update, 4 Delete; Process Activity 1
// Launch, 2 Terminate; Event Log Activity 4 Archive, 5 Rotate, 6 Start,
// 8 Restart; Authentication 1 Logon; Application Lifecycle 3 Start, 4 Stop.
// Network Activity's activity depends on the attempt (see networkActivity).
var mappings = map[string]mapping{
	audit.EventSessionCreate: apiCall(1, "Create", ecsSession, "start"),
	audit.EventSessionClose:  apiCall(4, "Delete", ecsSession, "end"),
	audit.EventSkillLoad:     apiCall(1, "Create", ecsConfig, "change"),
	audit.EventSkillUnload:   apiCall(4, "Delete", ecsConfig, "change"),
	audit.EventSkillRead:     apiCall(2, "Read", ecsFile, "access"),
	eventSkillLock:           apiCall(3, "Update", ecsConfig, "change"),
	eventSkillRefused:        apiCall(activityOther, "Refuse", ecsConfig, "denied"),
	eventSkillActivate:       apiCall(3, "Update", ecsConfig, "change"),

	audit.EventRunStart:  {classProcess, 1, "Launch", ecsProcess, []string{"start"}},
	audit.EventRunEnd:    {classProcess, 2, "Terminate", ecsProcess, []string{"end"}},
	audit.EventRunSignal: {classProcess, activityOther, "Signal", ecsProcess, []string{"change"}},

	audit.EventDecision:       apiCall(activityOther, "Authorize", ecsIAM, "info"),
	audit.EventConfirmRequest: apiCall(1, "Create", ecsIAM, "creation"),
	audit.EventConfirmApprove: apiCall(3, "Update", ecsIAM, "change", "allowed"),
	audit.EventConfirmDeny:    apiCall(3, "Update", ecsIAM, "change", "denied"),
	audit.EventConfirmExpire:  apiCall(4, "Delete", ecsIAM, "deletion"),
	audit.EventConfirmUse:     apiCall(3, "Update", ecsIAM, "access"),

	audit.EventAuthRefused: {classAuth, 1, "Logon", ecsAuth, []string{"start"}},

	audit.EventSessionSandbox:    apiCall(activityOther, "Sandbox", ecsHost, "info"),
	audit.EventSessionCheckpoint: apiCall(1, "Create", ecsHost, "creation"),
	audit.EventSessionRestore:    apiCall(3, "Update", ecsHost, "change"),
	audit.EventSessionFork:       apiCall(1, "Create", ecsHost, "creation"),

	audit.EventEgress: {classNetwork, activityUnknown, "", ecsNetwork, []string{"connection"}},

	audit.EventCallRefused: apiCall(activityOther, "Refuse", ecsAPI, "denied"),

	audit.EventWorkspaceList:   apiCall(2, "Read", ecsFile, "access"),
	audit.EventWorkspaceStat:   apiCall(2, "Read", ecsFile, "access"),
	audit.EventWorkspaceRead:   apiCall(2, "Read", ecsFile, "access"),
	audit.EventWorkspaceWrite:  apiCall(3, "Update", ecsFile, "change"),
	audit.EventWorkspaceDelete: apiCall(4, "Delete", ecsFile, "deletion"),

	audit.EventDaemonStart: {classAppLifecycle, 3, "Start", ecsProcess, []string{"start"}},
	audit.EventDaemonStop:  {classAppLifecycle, 4, "Stop", ecsProcess, []string{"end"}},

	audit.EventGenesis:    {classEventLog, 6, "Start", ecsConfig, []string{"creation"}},
	audit.EventRotate:     {classEventLog, 5, "Rotate", ecsConfig, []string{"change"}},
	audit.EventRecovered:  {classEventLog, activityOther, "Recover", ecsConfig, []string{"change"}},
	audit.EventResumed:    {classEventLog, 8, "Restart", ecsConfig, []string{"change"}},
	audit.EventCheckpoint: {classEventLog, 4, "Archive", ecsConfig, []string{"info"}},

	eventDepsBuild:       {classProcess, 1, "Launch", ecsPackage, []string{"installation"}},
	eventProposalCreate:  apiCall(1, "Create", ecsConfig, "creation"),
	eventProposalApprove: apiCall(3, "Update", ecsConfig, "change", "allowed"),
	eventProposalReject:  apiCall(3, "Update", ecsConfig, "change", "denied"),
}

// mappingOf returns where r goes: its table entry, or OCSF's Base Event
// (activity Other) and no ECS category for an event not in the table.
func mappingOf(r *audit.Record) mapping {
	m, ok := mappings[r.Event]
	if !ok {
		return mapping{classBase, activityOther, "Other", nil, []string{"info"}}
	}
	if r.Event == audit.EventEgress {
		m.Activity, m.ActivityName = networkActivity(r)
		if r.Egress != nil && !r.Egress.Allowed && r.Egress.Kind != "aggregate" {
			m.ECSType = []string{"connection", "denied"}
		} else {
			m.ECSType = []string{"connection", "allowed"}
		}
	}
	if r.Event == audit.EventDecision && r.Decision != nil {
		switch r.Decision.Effect {
		case "allow":
			m.ECSType = []string{"info", "allowed"}
		case "deny":
			m.ECSType = []string{"info", "denied"}
		}
	}
	return m
}

// networkActivity is an egress attempt's Network Activity activity: 5
// Refuse when denied, 4 Fail when it failed, 6 Traffic for a summary of
// several, 1 Open otherwise.
func networkActivity(r *audit.Record) (int, string) {
	e := r.Egress
	switch {
	case e == nil:
		return activityUnknown, "Unknown"
	case e.Kind == "aggregate":
		return 6, "Traffic"
	case !e.Allowed:
		return 5, "Refuse"
	case e.Error != "":
		return 4, "Fail"
	default:
		return 1, "Open"
	}
}

// OCSF status_id and severity_id values (dictionary, 1.3.0).
const (
	statusUnknown = 0
	statusSuccess = 1
	statusFailure = 2
	statusOther   = 99

	severityInformational = 1
	severityLow           = 2
	severityMedium        = 3
)

// statusOf says how the event came out: a decision by its effect, an
// egress attempt by whether it was allowed, anything else by its outcome
// word (refused, denied, error: failure; none or a word of completion:
// success; any other word: Other, named in status).
func statusOf(r *audit.Record) (id int, name string) {
	if r.Event == audit.EventDecision && r.Decision != nil {
		switch r.Decision.Effect {
		case "allow":
			return statusSuccess, "Success"
		case "deny":
			return statusFailure, "Failure"
		}
		return statusOther, r.Decision.Effect
	}
	if r.Egress != nil && r.Outcome == "" && r.Egress.Kind != "aggregate" {
		if r.Egress.Allowed && r.Egress.Error == "" {
			return statusSuccess, "Success"
		}
		return statusFailure, "Failure"
	}
	switch r.Outcome {
	case audit.OutcomeRefused, audit.OutcomeDenied, audit.OutcomeError, "failed":
		return statusFailure, "Failure"
	case "":
		if r.Error != "" {
			return statusFailure, "Failure"
		}
		return statusSuccess, "Success"
	case audit.OutcomeOK, "exit", "started", "destroyed", "expired", "discarded":
		return statusSuccess, "Success"
	}
	return statusOther, r.Outcome
}

// severityOf rates an event: the log's own trouble (a torn line dropped,
// an outage), a refused caller and a daemon stopped by an error are
// Medium, any other failure Low, the rest Informational.
func severityOf(r *audit.Record, status int) (id int, name string) {
	switch {
	case r.Event == audit.EventRecovered, r.Event == audit.EventResumed, r.Event == audit.EventAuthRefused,
		r.Event == audit.EventDaemonStop && r.Error != "":
		return severityMedium, "Medium"
	case status == statusFailure:
		return severityLow, "Low"
	}
	return severityInformational, "Informational"
}
