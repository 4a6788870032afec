// Package outcome is how a run ended and what it left, in the one form the
// sandbox's result, the wire's and the front ends' share: Reason, why a
// run ended, and Summary, the fields every result of a run carries (exit,
// signal, reason, the caps that cut its streams and outputs, the inputs it
// deleted, the runtime that ran it and what held its limits).
//
// runtime.Result and api.RunScriptResult embed Summary, so a field is
// declared once and a finished run's summary goes to the wire as one
// value; a result whose encoding differs (the MCP door's, the audit
// record's) is built from it in one function. runtime re-exports Reason and
// its values under their old names, as os does io/fs's FileMode.
//
// It imports nothing of skillbox, so the wire contract (sandbox/api) and
// the Go client can depend on it without the runtime's.
package outcome

// Reason says why a run ended.
type Reason string

const (
	ReasonExit      Reason = "exit"       // the process exited by itself
	ReasonTimeout   Reason = "timeout"    // wall-clock limit hit; the sandbox was killed
	ReasonOOM       Reason = "oom"        // memory limit hit
	ReasonPids      Reason = "pids"       // pids limit hit
	ReasonOutputCap Reason = "output_cap" // stdout/stderr over the cap; the sandbox was killed
	ReasonCancelled Reason = "cancelled"  // stopped on request (runs.cancel); the sandbox was killed
	ReasonKilled    Reason = "killed"     // killed from outside (caller cancelled, signal)
	// ReasonEgressCap: the run hit its cap on egress connections or bytes
	// sent (the egress stats' LimitHit says which); the sandbox was killed.
	ReasonEgressCap Reason = "egress_cap"
)

// Summary is what every result of a finished run says about how it ended,
// without its streams, files and timings, whose forms differ by result.
// Its JSON is skills.run_script's: every key present.
type Summary struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal"`
	// StdoutTruncated and StderrTruncated say the stream's cap cut it.
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	// Reason is why the run ended.
	Reason Reason `json:"reason"`
	// OutputsTruncated says a cap left changed files out; OutputsTruncatedBy
	// names the first cap hit (output_files, output_bytes or
	// output_file_bytes: runtime's Cap constants), OutputsOmittedFiles and
	// OutputsOmittedBytes count what the caps left out (bytes by the
	// files' sizes).
	OutputsTruncated    bool   `json:"outputs_truncated"`
	OutputsTruncatedBy  string `json:"outputs_truncated_by"`
	OutputsOmittedFiles int    `json:"outputs_omitted_files"`
	OutputsOmittedBytes int64  `json:"outputs_omitted_bytes"`
	// OutputsSkipped names entries that were not collected and why
	// (symlinks and special files the script made, files over a cap, ...),
	// at most 100 by name, then a count.
	OutputsSkipped []string `json:"outputs_skipped"`
	// Deleted are the input files and symlinks the script removed from its
	// working directory (relative paths, in lexical order).
	Deleted        []string `json:"deleted"`
	Runtime        string   `json:"runtime"`
	RuntimeVersion string   `json:"runtime_version"`
	// LimitsEnforcedBy names, for each limit by its HCL name (memory,
	// pids, cpus, timeout, ...), what held it in this run: "cgroup",
	// "gvisor", "tmpfs", "skillbox" (its clock and caps), "skillbox-poll"
	// (memory sampled, the sandbox killed above it: reason oom),
	// "gvisor-rlimit" (tasks bounded; a refused fork is the script's
	// error), or "none" (nothing on this host could: a rootless run's
	// cpus); runtime's EnforcedBy constants.
	LimitsEnforcedBy map[string]string `json:"limits_enforced_by,omitempty"`
	// Warm says the run used a pre-booted sandbox; false is a cold start.
	Warm bool `json:"warm"`
}
