package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/sandbox/api"
)

// Events. Each record's event is one of these; the audit.* events are written
// by the log itself and cannot be appended by callers.
const (
	EventDaemonStart    = "daemon.start"         // daemon: version, config hash, runtime versions
	EventDaemonStop     = "daemon.stop"          // daemon; outcome and error say why
	EventSessionCreate  = "session.create"       // session_id
	EventSessionClose   = "session.close"        // session_id
	EventSkillLoad      = "skills.load"          // skill (one record per skill) or skills
	EventSkillUnload    = "skills.unload"        // skill or skills
	EventSkillRead      = "skills.read"          // read; outcome "ok" or "refused" with error
	EventRunStart       = "run.start"            // run: what is about to run, before the sandbox starts
	EventRunEnd         = "run.end"              // run: how it ended, before the result is returned
	EventDecision       = "policy.decision"      // decision: allow / deny / confirm and the rule
	EventConfirmRequest = "confirmation.request" // confirmation: id, digest, rule, reason, expiry
	EventConfirmApprove = "confirmation.approve" // confirmation; peer is the approver
	EventConfirmDeny    = "confirmation.deny"    // confirmation; peer is the approver
	EventConfirmExpire  = "confirmation.expire"  // confirmation
	EventConfirmUse     = "confirmation.use"     // confirmation consumed (or refused) by a run
	EventAuthRefused    = "auth.refused"         // peer, method; error says why
	// A session's own sandbox (isolation = "session"): started, destroyed,
	// checkpointed, restored and forked, with its id (and a checkpoint's
	// digest) in detail; runs.signal on a background run.
	EventSessionSandbox    = "session.sandbox"
	EventSessionCheckpoint = "session.checkpoint"
	EventSessionRestore    = "session.restore"
	EventSessionFork       = "session.fork"
	EventRunSignal         = "run.signal"
	// EventEgress is one connection attempt of a run through its egress
	// proxy, or one name its resolver refused: egress (run id, kind,
	// destination name, address and port, allowed and the rule, bytes each
	// way, duration).
	EventEgress = "egress.connect"
	// EventCallRefused is a call refused or failed with nothing more
	// specific recorded for it (bad params, unknown session or method,
	// malformed lines): peer, method, request id, detail.kind and code,
	// error (the message, clipped), and of the params only their size and
	// sha256. Outcome "suppressed" is the per-connection summary written
	// once a connection's cap of such records was reached.
	EventCallRefused = "call.refused"
	// The files API on a session's workspace (workspace: path, offset,
	// length, bytes, sha256 of the bytes written; removed).
	EventWorkspaceList   = "workspace.list"
	EventWorkspaceStat   = "workspace.stat"
	EventWorkspaceRead   = "workspace.read"
	EventWorkspaceWrite  = "workspace.write"
	EventWorkspaceDelete = "workspace.delete"

	EventGenesis    = "audit.genesis"    // first record of a log: log.id anchors the chain
	EventRotate     = "audit.rotate"     // first record of every later file
	EventRecovered  = "audit.recovered"  // a torn last line was found on open and dropped
	EventResumed    = "audit.resumed"    // the log is writable again after an outage
	EventCheckpoint = "audit.checkpoint" // a signed checkpoint of the head
)

// Outcomes commonly used in Record.Outcome; other short words are allowed.
const (
	OutcomeOK      = "ok"
	OutcomeRefused = "refused" // not done: bad input, escape attempt, not an approver, …
	OutcomeDenied  = "denied"  // a policy deny
	OutcomeError   = "error"   // attempted and failed
	// OutcomeAggregated sums up events of one peer that were counted, not
	// recorded one by one (a rate limit); Detail says how many.
	OutcomeAggregated = "aggregated"
)

// Record is one audit event. Callers fill Event and what describes it; Append
// fills Seq, Time, Replica, PrevHash and Hash. The field order here is the key
// order of the JSON line (see the package comment): do not reorder fields,
// and keep Hash last.
type Record struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Replica names the daemon replica whose chain holds the record
	// (Options.Replica). Records of logs written before replicas existed
	// have none.
	Replica   string    `json:"replica,omitempty"`
	Event     string    `json:"event"`
	Peer      *api.Peer `json:"peer,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	// TraceID is the OpenTelemetry trace of the call the record is part
	// of (32 hex digits), when daemon.traces is set and the call was
	// sampled: the record and the call's spans name each other.
	TraceID string `json:"trace_id,omitempty"`
	// Method is the JSON-RPC method, when the record is about a call.
	Method string `json:"method,omitempty"`
	// Skill is the one skill the event concerns; Skills lists several (a
	// load of many names, an unload of all).
	Skill        *SkillRef         `json:"skill,omitempty"`
	Skills       []SkillRef        `json:"skills,omitempty"`
	Read         *ReadInfo         `json:"read,omitempty"`
	WorkspaceOp  *WorkspaceOpInfo  `json:"workspace_op,omitempty"`
	Run          *RunInfo          `json:"run,omitempty"`
	Decision     *DecisionInfo     `json:"decision,omitempty"`
	Confirmation *ConfirmationInfo `json:"confirmation,omitempty"`
	Daemon       *DaemonInfo       `json:"daemon,omitempty"`
	Log          *LogInfo          `json:"log,omitempty"`
	Checkpoint   *Checkpoint       `json:"checkpoint,omitempty"`
	Egress       *EgressInfo       `json:"egress,omitempty"`
	Outcome      string            `json:"outcome,omitempty"`
	Error        string            `json:"error,omitempty"`
	// Detail holds small extra facts that have no field yet (e.g. "mode":
	// "add" on a load). Never put secrets here.
	Detail   map[string]string `json:"detail,omitempty"`
	PrevHash string            `json:"prev_hash"`
	Hash     string            `json:"hash,omitempty"`
}

// EgressInfo is one egress attempt of a run (EventEgress).
type EgressInfo struct {
	RunID string `json:"run_id"`
	egress.Attempt
}

// SkillRef names a skill and pins its content.
type SkillRef struct {
	Name     string `json:"name"`
	Digest   string `json:"digest,omitempty"` // "sha256:…" over the skill's files
	Location string `json:"location,omitempty"`
	// Path is where a run mounted the skill (skills.run_code: /skills/NAME).
	Path string `json:"path,omitempty"`
}

// ReadInfo describes a skills.read: what was asked and, when served, what was
// returned. A refusal sets Record.Outcome "refused" and Record.Error.
type ReadInfo struct {
	Path      string `json:"path"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
	Bytes     int64  `json:"bytes,omitempty"`  // size of the file
	Served    int64  `json:"served,omitempty"` // bytes returned
	SHA256    string `json:"sha256,omitempty"` // of the whole file
	Truncated bool   `json:"truncated,omitempty"`
}

// WorkspaceOpInfo is one call of the files API on a session's workspace.
type WorkspaceOpInfo struct {
	Path      string `json:"path"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"` // bytes read or written
	Size      int64  `json:"size,omitempty"`   // the file's size after the call
	SHA256    string `json:"sha256,omitempty"` // of the bytes written
	Truncate  bool   `json:"truncate,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Removed   int    `json:"removed,omitempty"`
	Entries   int    `json:"entries,omitempty"` // listed
}

// RunInfo describes one run_script or run_code. The start record holds what
// was asked and where it runs; the end record repeats that and adds how it
// ended: the run's outcome.Summary in the record's own encoding (ExitCode
// absent until the run has ended, every field omitempty), which the engine
// fills in one place.
type RunInfo struct {
	RunID        string   `json:"run_id,omitempty"`
	Script       string   `json:"script"`                  // path relative to the skill; run_code: the code's path in the sandbox
	ScriptSHA256 string   `json:"script_sha256,omitempty"` // of the script's bytes
	Args         []string `json:"args,omitempty"`
	// EnvNames and EnvHash come from EnvSummary: names only, values hashed.
	EnvNames       []string       `json:"env_names,omitempty"`
	EnvHash        string         `json:"env_hash,omitempty"`
	StdinBytes     int64          `json:"stdin_bytes,omitempty"`
	StdinSHA256    string         `json:"stdin_sha256,omitempty"`
	Inputs         []FileRef      `json:"inputs,omitempty"` // files the caller passed in
	Runtime        string         `json:"runtime,omitempty"`
	RuntimeVersion string         `json:"runtime_version,omitempty"`
	Image          string         `json:"image,omitempty"`
	ImageDigest    string         `json:"image_digest,omitempty"`
	DepsLayer      string         `json:"deps_layer,omitempty"` // dependency layer digest
	Warnings       []string       `json:"warnings,omitempty"`   // what the run went without and why (api.RunScriptResult.Warnings)
	Limits         runtime.Limits `json:"limits,omitzero"`
	Network        bool           `json:"network"`
	// Egress lists the destinations the run may reach through the egress
	// proxy (with the rules that allow them); EgressStats sums up its
	// connections (run.end).
	Egress []string `json:"egress,omitempty"`
	// EgressSecrets names the secrets the proxy adds (never values).
	EgressSecrets []string      `json:"egress_secrets,omitempty"`
	EgressStats   *egress.Stats `json:"egress_stats,omitempty"`
	// Workspace is the run's workspace: in run.start every file copied in
	// (WorkspaceFiles) and every path refused, in run.end also every change
	// applied back, conflict and refusal.
	Workspace      *api.WorkspaceReport `json:"workspace,omitempty"`
	WorkspaceFiles []FileRef            `json:"workspace_files,omitempty"`
	// Digest is the run's confirmation digest (skill digest, script bytes,
	// args, env, limits); ConfirmationID the approval it used, if any.
	Digest         string    `json:"digest,omitempty"`
	ConfirmationID string    `json:"confirmation_id,omitempty"`
	Started        time.Time `json:"started,omitzero"`
	Ended          time.Time `json:"ended,omitzero"`
	DurationMS     int64     `json:"duration_ms,omitempty"`
	// ExitCode is nil until the run has ended with a status.
	// Isolation is "session" for a run in its session's sandbox
	// (SessionSandbox names it), Background for a run that outlives its
	// call (its run.end comes when it ends).
	Isolation      string `json:"isolation,omitempty"`
	SessionSandbox string `json:"session_sandbox,omitempty"`
	Background     bool   `json:"background,omitempty"`
	ExitCode       *int   `json:"exit_code,omitempty"`
	Signal         string `json:"signal,omitempty"`
	Reason         string `json:"reason,omitempty"` // exit, timeout, oom, pids, output_cap, killed
	// LimitsEnforcedBy names what held each limit (run.end; see
	// outcome.Summary.LimitsEnforcedBy): cgroup, gvisor, tmpfs, skillbox,
	// skillbox-poll, gvisor-rlimit, or none.
	LimitsEnforcedBy map[string]string `json:"limits_enforced_by,omitempty"`
	// Warm: the run used a pre-booted sandbox (run.end only).
	Warm            bool   `json:"warm,omitempty"`
	StdoutBytes     int64  `json:"stdout_bytes,omitempty"`
	StdoutSHA256    string `json:"stdout_sha256,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrBytes     int64  `json:"stderr_bytes,omitempty"`
	StderrSHA256    string `json:"stderr_sha256,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// Outputs are the files the script created or changed in its working
	// directory (paths relative to it); OutputsSkipped names entries not
	// collected and why (links, special files, files a cap left out).
	Outputs        []FileRef `json:"outputs,omitempty"`
	OutputsSkipped []string  `json:"outputs_skipped,omitempty"`
	// OutputsTruncated says an output cap left files out; OutputsTruncatedBy
	// names the first cap hit (output_files, output_bytes,
	// output_file_bytes); OutputsOmittedFiles/Bytes count what was left out.
	OutputsTruncated    bool   `json:"outputs_truncated,omitempty"`
	OutputsTruncatedBy  string `json:"outputs_truncated_by,omitempty"`
	OutputsOmittedFiles int    `json:"outputs_omitted_files,omitempty"`
	OutputsOmittedBytes int64  `json:"outputs_omitted_bytes,omitempty"`
	// Code is the code of a skills.run_code run (the skills it mounted
	// are the record's Skills, with their paths).
	Code *CodeInfo `json:"code,omitempty"`
}

// FileRef is a file by name, size and content hash. An input entry that
// is not a regular file has Type "dir" or "symlink" (and Target, the
// link's target).
type FileRef struct {
	Path   string `json:"path"`
	Type   string `json:"type,omitempty"`
	Target string `json:"target,omitempty"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

// DecisionInfo is one policy decision.
type DecisionInfo struct {
	Tool string `json:"tool"`
	// InputSHA256 hashes the tool input the decision looked at, if any.
	InputSHA256 string `json:"input_sha256,omitempty"`
	Effect      string `json:"effect"`             // allow, deny, confirm
	Rule        string `json:"rule,omitempty"`     // the rule's name
	RulePos     string `json:"rule_pos,omitempty"` // file:line of the rule
	Mode        string `json:"mode,omitempty"`     // allowed-tools meaning: restrict, preapprove
	Reason      string `json:"reason,omitempty"`
}

// ConfirmationInfo is one step of a confirmation's life. For approve and deny
// the record's Peer is the approver; RequestedBy is who asked for the run.
type ConfirmationInfo struct {
	ID          string    `json:"id"`
	Digest      string    `json:"digest,omitempty"`
	Rule        string    `json:"rule,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	RequestedBy *uint32   `json:"requested_by,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
}

// DaemonInfo describes the daemon at start and stop.
type DaemonInfo struct {
	Version    string `json:"version"`
	PID        int    `json:"pid,omitempty"`
	ConfigPath string `json:"config_path,omitempty"`
	ConfigHash string `json:"config_hash,omitempty"` // sha256 of the config file's bytes
	Socket     string `json:"socket,omitempty"`
	// Runtimes maps runtime name to its version (e.g. "runsc": "release-…").
	Runtimes map[string]string `json:"runtimes,omitempty"`
}

// LogInfo is the log's own bookkeeping, on audit.* records.
type LogInfo struct {
	ID       string `json:"id"`
	Version  int    `json:"version,omitempty"` // format version, on genesis
	File     string `json:"file,omitempty"`
	PrevFile string `json:"prev_file,omitempty"`
	Reason   string `json:"reason,omitempty"` // why rotated: size, age, open
	// Dropped is the torn tail an audit.recovered record reports.
	Dropped *Dropped `json:"dropped,omitempty"`
	// Outage is what an audit.resumed record reports.
	Outage *Outage `json:"outage,omitempty"`
}

// Dropped names bytes cut from a file because they were not a whole record
// (a write torn by a crash or power loss).
type Dropped struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Excerpt is the first bytes dropped, base64, at most 4 KiB.
	Excerpt string `json:"excerpt,omitempty"`
}

// Outage says how long the log could not be written.
type Outage struct {
	Since     time.Time `json:"since"`
	Refused   int       `json:"refused"` // appends that failed meanwhile
	LastError string    `json:"last_error,omitempty"`
}

// FormatVersion is the log format written in genesis records.
const FormatVersion = 1

// ProcessName returns /proc/PID/comm for pid, or "" if it cannot be read (the
// process is gone, or /proc is not mounted). It is informational: a name is
// set by the process itself and can be anything.
func ProcessName(pid int32) string {
	if pid <= 0 {
		return ""
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\n")
}

// EnvSummary turns an environment into what the audit keeps: the sorted names
// and one hash over names and values, so values are never stored but a
// holder of the same environment can show it matches. The hash is the
// lowercase hex SHA-256 of, for each variable in name order, the 8-byte
// big-endian length of the name, the name, the 8-byte big-endian length of
// the value, and the value. An empty environment gives no names and "".
func EnvSummary(env map[string]string) (names []string, hash string) {
	if len(env) == 0 {
		return nil, ""
	}
	names = make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	h := sha256.New()
	var n [8]byte
	for _, k := range names {
		binary.BigEndian.PutUint64(n[:], uint64(len(k)))
		h.Write(n[:])
		h.Write([]byte(k))
		v := env[k]
		binary.BigEndian.PutUint64(n[:], uint64(len(v)))
		h.Write(n[:])
		h.Write([]byte(v))
	}
	return names, hex.EncodeToString(h.Sum(nil))
}

// Summary is a short human reading of how the event came out, for tables:
// the outcome, else what the event's details imply.
func (r *Record) Summary() string {
	s := r.Outcome
	switch {
	case r.Log != nil && r.Log.Dropped != nil:
		d := r.Log.Dropped
		s = fmt.Sprintf("dropped %d bytes of a torn line at %s offset %d", d.Bytes, d.File, d.Offset)
	case r.Log != nil && r.Log.Outage != nil:
		o := r.Log.Outage
		s = fmt.Sprintf("writable again; down since %s, %d appends refused", o.Since.UTC().Format(time.RFC3339), o.Refused)
	case r.Event == EventRotate && r.Log != nil:
		s = fmt.Sprintf("%s continues %s (%s)", r.Log.File, r.Log.PrevFile, r.Log.Reason)
	case r.Event == EventGenesis && r.Log != nil:
		s = "log " + r.Log.ID
	case r.Checkpoint != nil:
		s = fmt.Sprintf("signed seq %d by key %s", r.Checkpoint.Seq, r.Checkpoint.KeyID)
	case r.Run != nil && r.Run.ExitCode != nil:
		rs := r.Run.Reason
		if rs == "" {
			rs = "exit"
		}
		s = rs + " " + strconv.Itoa(*r.Run.ExitCode)
		if r.Run.Signal != "" {
			s += " (" + r.Run.Signal + ")"
		}
	case s == "" && r.Decision != nil:
		s = r.Decision.Effect
	}
	if r.Decision != nil && r.Decision.Rule != "" {
		s += " rule=" + r.Decision.Rule
	}
	if r.Error != "" {
		if s != "" {
			s += ": "
		}
		s += r.Error
	}
	return s
}

// SkillNames lists the skills the record names (Skill, then Skills).
func (r *Record) SkillNames() []string {
	var out []string
	if r.Skill != nil {
		out = append(out, r.Skill.Name)
	}
	for _, s := range r.Skills {
		out = append(out, s.Name)
	}
	return out
}
