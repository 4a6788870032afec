package runner

import (
	"strings"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// AuditRun is the plan as the audit records it: what an approval binds
// (script and its hash, args, network, egress, digest, code). A
// confirmation request keeps the code's text for the approver (withCode);
// the run's own records keep its size and hash. The run.start and run.end
// records add what only the run knows (Engine.runInfo).
func (p *Plan) AuditRun(withCode bool) *audit.RunInfo {
	return &audit.RunInfo{
		Script: p.script, ScriptSHA256: p.scriptSHA256, Args: p.request.Args,
		Network: p.network, Egress: p.AuditEgress(), Digest: p.digest, Code: p.code.AuditCode(withCode),
	}
}

// runInfo is the run as its run.start and run.end records name it; box is
// the session sandbox it went to ("" before it has).
func (e *Engine) runInfo(p *Plan, o ExecOptions, img runtime.ImageRef, rtVersion, box string) *audit.RunInfo {
	req := p.request
	ri := p.AuditRun(false)
	ri.RunID, ri.Limits, ri.EgressSecrets, ri.ConfirmationID = p.runID, p.limits, p.secretNames(), o.ConfirmationID
	ri.EnvNames, ri.EnvHash = audit.EnvSummary(req.Env)
	ri.Runtime, ri.RuntimeVersion, ri.Image, ri.ImageDigest = e.rt.Name(), rtVersion, img.Name, img.Digest
	if p.isolation == policy.IsolationSession {
		ri.Isolation, ri.SessionSandbox, ri.Background = string(p.isolation), box, req.Background
	}
	if len(req.Stdin) > 0 {
		ri.StdinBytes, ri.StdinSHA256 = int64(len(req.Stdin)), SHA256Hex(req.Stdin)
	}
	ri.Inputs = InputRefs(req.Files)
	return ri
}

// InputRefs names a run's input files as the audit log and an approver see
// them: path, size and sha256 (a directory or link by its type and target).
func InputRefs(files []runtime.InputFile) []audit.FileRef {
	var refs []audit.FileRef
	for _, f := range files {
		ref := audit.FileRef{Path: f.Name, Size: int64(len(f.Data)), SHA256: SHA256Hex(f.Data)}
		switch f.Kind {
		case runtime.InputDir:
			ref = audit.FileRef{Path: f.Name, Type: string(f.Kind)}
		case runtime.InputSymlink:
			ref = audit.FileRef{Path: f.Name, Type: string(f.Kind), Target: f.Target}
		}
		refs = append(refs, ref)
	}
	return refs
}

// planDetail names the configuration that shaped a run: the image block
// that chose the interpreter, the sources of its limits and the network rule.
func planDetail(p *Plan) map[string]string {
	d := map[string]string{"interpreter": strings.Join(p.interpreter.Argv, " ")}
	if c := p.request.Command; c != nil {
		d["command"] = audit.ClipText(c.Command, 2048)
	}
	if p.interpreter.Rule != "" {
		d["interpreter_rule"] = p.interpreter.Rule
	}
	if len(p.limitRules) > 0 {
		d["limit_rules"] = strings.Join(p.limitRules, "; ")
	}
	if p.networkRule != "" {
		d["network_rule"] = p.networkRule
	}
	if p.egressRule != "" {
		d["egress_rule"] = p.egressRule
	}
	if p.scriptDirsRule != "" {
		d["script_dirs_rule"] = p.scriptDirsRule
	}
	if len(p.moduleEnv) > 0 {
		d["module_path"] = strings.Join(p.moduleEnv, " ")
	}
	return d
}

// fillRunResult adds to a run's run.end record how it ended: its summary
// (summaryInfo), the streams by size and hash, the outputs by path, size
// and hash, the egress stats and the duration.
func fillRunResult(ri *audit.RunInfo, res *runtime.Result) {
	summaryInfo(ri, &res.Summary)
	ri.EgressStats = res.Egress
	ri.DurationMS = res.Duration.Milliseconds()
	ri.StdoutBytes = int64(len(res.Stdout))
	ri.StderrBytes = int64(len(res.Stderr))
	ri.StdoutSHA256 = SHA256Hex(res.Stdout)
	ri.StderrSHA256 = SHA256Hex(res.Stderr)
	for _, o := range res.Outputs {
		ri.Outputs = append(ri.Outputs, audit.FileRef{Path: o.Path, Size: o.Size, SHA256: o.SHA256})
	}
}

// summaryInfo is the one place a run's summary becomes audit fields. The
// record has its own encoding (no exit code until the run has ended, every
// field omitempty), so RunInfo does not embed outcome.Summary. The runtime
// stays the one run.start named, the version the run reports wins, and the
// inputs the script deleted are not recorded.
func summaryInfo(ri *audit.RunInfo, s *outcome.Summary) {
	ri.ExitCode, ri.Signal, ri.Reason = &s.ExitCode, s.Signal, string(s.Reason)
	ri.StdoutTruncated, ri.StderrTruncated = s.StdoutTruncated, s.StderrTruncated
	ri.OutputsSkipped = s.OutputsSkipped
	ri.OutputsTruncated, ri.OutputsTruncatedBy = s.OutputsTruncated, s.OutputsTruncatedBy
	ri.OutputsOmittedFiles, ri.OutputsOmittedBytes = s.OutputsOmittedFiles, s.OutputsOmittedBytes
	ri.LimitsEnforcedBy, ri.Warm = s.LimitsEnforcedBy, s.Warm
	if s.RuntimeVersion != "" {
		ri.RuntimeVersion = s.RuntimeVersion
	}
}
