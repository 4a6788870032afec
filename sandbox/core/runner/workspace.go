package runner

import (
	"fmt"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
)

// WorkspaceRequest asks for a run whose /work is backed by a workspace (see
// package workspace): the files it names are copied in before the run,
// and the run's changes are applied back after it where policy gives the
// workspace the mode write.
type WorkspaceRequest struct {
	Dir  string // the host directory
	Kind string // api.WorkspaceHost or api.WorkspaceSession
	// Inputs are the workspace paths and globs the run is given; none:
	// the whole workspace.
	Inputs []string
	// Owner owns what the write-back creates (a daemon writing into a
	// caller's directory); nil: the writer.
	Owner *workspace.Owner
	// RequireGrant refuses the workspace unless a policy rule sets its
	// mode (the daemon's callers): the default mode is no grant.
	RequireGrant bool
	// Quota bounds what the workspace may hold after the write-back (a
	// session's workspace); 0: none.
	Quota int64
}

// WorkspacePlan is a run's prepared workspace: what policy gives it and
// what was read from it, which the run's digest covers.
type WorkspacePlan struct {
	Request WorkspaceRequest
	Dir     string // resolved
	Grant   policy.WorkspaceGrant
	// Snapshot is what the run is given; write-back applies against it.
	Snapshot *workspace.Snapshot
}

// skillNames are the skills whose rules decide a run's workspace: the
// script's skill or the skills a code run mounts ("" for none, which only
// rules for every skill match).
func (p *Plan) skillNames() []string {
	var out []string
	if p.code != nil {
		for _, m := range p.code.Mounts {
			out = append(out, m.Skill.Name)
		}
	} else if sk := p.request.Skill; sk != nil {
		out = append(out, sk.Name)
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

// planWorkspace reads the run's workspace into p: policy's grant (a mode
// of none refuses the run), then the snapshot of the files the run names,
// whose entries join the request's own files in /work.
func (e *Engine) planWorkspace(p *Plan) error {
	wr := p.request.Workspace
	if wr.Kind != api.WorkspaceHost && wr.Kind != api.WorkspaceSession {
		return errkind.Errorf(errkind.InvalidParams, "workspace kind %q: use %q or %q", wr.Kind, api.WorkspaceHost, api.WorkspaceSession)
	}
	ws, err := workspace.Open(wr.Dir)
	if err != nil {
		return err
	}
	defer ws.Close()
	dir := ws.Dir()
	grant := p.policy.Workspace(policy.WorkspaceRequest{Dir: dir, Kind: wr.Kind})
	if wr.RequireGrant && grant.Rule == policy.RuleWorkspaceHostDefault {
		return errkind.Errorf(errkind.Denied, "no policy rule grants the workspace %s to runs of %s: an administrator sets workspace = \"read\" or \"write\" for it (workspace_paths covering it) in a policy rule for the skill", dir, quoteList(p.skillNames()))
	}
	if grant.Mode == api.WorkspaceNone {
		return errkind.Errorf(errkind.Denied, "runs of %s may not use the workspace %s (workspace = \"none\" in %s); run without it or ask an administrator for a rule that grants it", quoteList(p.skillNames()), dir, grant.Rule)
	}
	snap, err := ws.Snapshot(wr.Inputs, workspace.Options{Excludes: grant.Excludes})
	if err != nil {
		return err
	}
	taken := make(map[string]int, len(p.request.Files))
	for i, f := range p.request.Files {
		taken[f.Name] = i
	}
	files := append([]runtime.InputFile{}, p.request.Files...)
	for _, f := range snap.Files {
		if i, ok := taken[f.Name]; ok {
			return errkind.Errorf(errkind.InvalidParams, "files[%d] %s is also a path of the workspace %s: give it another name, or leave it to the workspace", i, runtime.QuoteName(f.Name), dir)
		}
		files = append(files, f)
	}
	if err := runtime.ValidateInputs(files, p.limits.WorkdirBytes); err != nil {
		return errkind.Wrap(errkind.InvalidParams, fmt.Errorf("the workspace's files with the call's: %w", err))
	}
	p.workspace = &WorkspacePlan{Request: *wr, Dir: dir, Grant: grant, Snapshot: snap}
	return nil
}

// quoteList quotes names for a message ("" reads as "code without skills").
func quoteList(names []string) string {
	if len(names) == 1 && names[0] == "" {
		return "code without skills"
	}
	return fmt.Sprintf("%q", names)
}

// inputFiles are the files the run's /work starts with: the request's and
// the workspace's.
func (p *Plan) inputFiles() []runtime.InputFile {
	if p.workspace == nil {
		return p.request.Files
	}
	return append(append([]runtime.InputFile{}, p.request.Files...), p.workspace.Snapshot.Files...)
}

// report is the workspace's part of a run's result and records, before
// anything is applied back.
func (w *WorkspacePlan) report() *api.WorkspaceReport {
	r := &api.WorkspaceReport{
		Dir: w.Dir, Kind: w.Request.Kind, Mode: w.Grant.Mode, Rule: w.Grant.Rule,
		Excluded:  w.Snapshot.Excluded,
		Written:   []api.WorkspaceChange{},
		Deleted:   []api.WorkspaceChange{},
		Conflicts: []api.WorkspaceFinding{},
		Refused:   append([]api.WorkspaceFinding{}, w.Snapshot.Refused...),
	}
	for _, f := range w.Snapshot.Files {
		if f.EffectiveKind() == runtime.InputRegular {
			r.Inputs++
			r.InputBytes += int64(len(f.Data))
		}
	}
	return r
}

// auditFiles names every entry copied in, with its sha256.
func (w *WorkspacePlan) auditFiles() []audit.FileRef {
	out := make([]audit.FileRef, 0, len(w.Snapshot.Files))
	for _, f := range w.Snapshot.Files {
		ref := audit.FileRef{Path: f.Name, Size: int64(len(f.Data)), SHA256: SHA256Hex(f.Data)}
		switch f.Kind {
		case runtime.InputDir:
			ref = audit.FileRef{Path: f.Name, Type: string(f.Kind)}
		case runtime.InputSymlink:
			ref = audit.FileRef{Path: f.Name, Type: string(f.Kind), Target: f.Target}
		}
		out = append(out, ref)
	}
	return out
}

// applyBack applies a finished run's changes to its workspace and returns
// the report: nothing comes back from a read-only workspace or from a run
// that did not end by itself (timeout, a cap, cancelled), whose files may
// be half written.
func (w *WorkspacePlan) applyBack(res *runtime.Result, acct *workspace.Account) *api.WorkspaceReport {
	r := w.report()
	switch {
	case w.Grant.Mode != api.WorkspaceWrite:
		if len(res.Outputs) > 0 || len(res.Deleted) > 0 {
			r.NotApplied = fmt.Sprintf("the workspace is read-only for this run (%s); its %d changed and %d deleted files were not applied (they are in the result's outputs)", w.Grant.Rule, len(res.Outputs), len(res.Deleted))
		}
		return r
	case res.Reason != runtime.ReasonExit:
		r.NotApplied = fmt.Sprintf("the run ended by %s, so its files may be half written; none of its changes were applied", res.Reason)
		return r
	}
	ws, err := workspace.Open(w.Dir)
	if err != nil {
		r.NotApplied = "the workspace cannot be opened again: " + err.Error()
		return r
	}
	defer ws.Close()
	rep, err := ws.Apply(w.Snapshot, workspace.Changes{Written: res.Outputs, Deleted: res.Deleted}, w.Grant.Delete,
		workspace.Options{Excludes: w.Grant.Excludes, Owner: w.Request.Owner, Quota: w.Request.Quota, Account: acct})
	if err != nil {
		r.NotApplied = "the workspace could not be written: " + err.Error()
		return r
	}
	r.Written = append(r.Written, rep.Written...)
	r.Deleted = append(r.Deleted, rep.Deleted...)
	r.Conflicts = append(r.Conflicts, rep.Conflicts...)
	r.Refused = append(r.Refused, rep.Refused...)
	return r
}
