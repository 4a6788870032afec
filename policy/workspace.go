package policy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/workspace"
)

// WorkspaceTool is the pseudo-tool a run with a workspace is decided as:
// denied where policy gives the workspace mode "none", and held for an
// approver where a matching rule lists it in confirm (confirm =
// ["workspace"]).
const WorkspaceTool = "workspace"

// Rule names of the workspace defaults.
const (
	RuleWorkspaceHostDefault    = "default: a host workspace is read-only (no matching rule sets workspace)"
	RuleWorkspaceSessionDefault = "default: the session workspace is writable (no matching rule sets workspace)"
)

// WorkspaceRequest is the input of the workspace pseudo-tool: which
// workspace a run asks for.
type WorkspaceRequest struct {
	Dir  string `json:"dir"`  // the host directory (absolute, cleaned)
	Kind string `json:"kind"` // api.WorkspaceHost or api.WorkspaceSession
}

// WorkspaceGrant is what policy lets the runs of a skill do with one
// workspace.
type WorkspaceGrant struct {
	Mode string // api.WorkspaceNone, WorkspaceRead or WorkspaceWrite
	// Delete: the run's deletions are applied (else reported).
	Delete bool
	// Excludes are the patterns (workspace.Match) of paths neither copied
	// in nor written back.
	Excludes []string
	// Rule names the rule that set the mode, or the default.
	Rule string
}

// workspaceRank orders the modes from the strictest.
var workspaceRank = map[string]int{api.WorkspaceNone: 0, api.WorkspaceRead: 1, api.WorkspaceWrite: 2}

// Workspace returns what runs may do with the workspace req: among the
// matching rules whose workspace_paths cover req.Dir (a rule without them
// covers every directory), the strictest workspace mode wins; a rule that
// says nothing leaves the default, read for a host directory and write for
// the session's own. Deletions are applied only when a covering rule sets
// workspace_delete = true and none sets it false (the session workspace:
// unless one sets it false). The excludes are those of every covering rule
// together, or DefaultWorkspaceExcludes when none lists any.
//
// A combined policy (StrictestPolicy) combines its skills' grants: the
// strictest mode (naming its rule), deletions only where every skill's
// rules apply them, and every skill's excludes.
func (p *SkillPolicy) Workspace(req WorkspaceRequest) WorkspaceGrant {
	var out WorkspaceGrant
	for i, q := range p.Parts() {
		g := q.workspace(req)
		if i == 0 {
			out = g
			out.Excludes = slices.Clone(g.Excludes) // never append to DefaultWorkspaceExcludes
			continue
		}
		if workspaceRank[g.Mode] < workspaceRank[out.Mode] {
			out.Mode, out.Rule = g.Mode, g.Rule
		}
		out.Delete = out.Delete && g.Delete
		for _, x := range g.Excludes {
			if !slices.Contains(out.Excludes, x) {
				out.Excludes = append(out.Excludes, x)
			}
		}
	}
	return out
}

// workspace is Workspace for one skill.
func (p *SkillPolicy) workspace(req WorkspaceRequest) WorkspaceGrant {
	g := WorkspaceGrant{Mode: api.WorkspaceRead, Rule: RuleWorkspaceHostDefault}
	deleteYes, deleteNo := false, false
	if req.Kind == api.WorkspaceSession {
		g = WorkspaceGrant{Mode: api.WorkspaceWrite, Rule: RuleWorkspaceSessionDefault}
		deleteYes = true
	}
	set := false
	var excludes []string
	for _, r := range p.rules {
		if !r.coversWorkspace(req.Dir) {
			continue
		}
		if r.Workspace != "" && (!set || workspaceRank[r.Workspace] < workspaceRank[g.Mode]) {
			g.Mode, g.Rule, set = r.Workspace, r.String(), true
		}
		if r.WorkspaceDelete != nil {
			if *r.WorkspaceDelete {
				deleteYes = true
			} else {
				deleteNo = true
			}
		}
		excludes = append(excludes, r.WorkspaceExcludes...)
	}
	g.Delete = deleteYes && !deleteNo && g.Mode == api.WorkspaceWrite
	if excludes == nil {
		excludes = DefaultWorkspaceExcludes
	}
	g.Excludes = excludes
	return g
}

// DefaultWorkspaceExcludes are the paths no run sees or writes unless a
// rule lists its own workspace_excludes: version control, environment
// files, keys, certificates and key stores.
var DefaultWorkspaceExcludes = workspace.DefaultExcludes

// coversWorkspace says whether the rule's workspace_paths cover dir.
func (r *Rule) coversWorkspace(dir string) bool {
	if len(r.WorkspacePaths) == 0 {
		return true
	}
	rel := strings.TrimPrefix(filepath.ToSlash(filepath.Clean(dir)), "/")
	for _, p := range r.WorkspacePaths {
		if workspace.Match(strings.TrimPrefix(p, "/"), rel) {
			return true
		}
	}
	return false
}

// decideWorkspace answers the workspace pseudo-tool for skill: deny for
// the mode "none", confirm where a matching rule lists "workspace" in
// confirm, else allow.
func (p *SkillPolicy) decideWorkspace(input []byte) Decision {
	skill := p.Skill
	var req WorkspaceRequest
	if err := json.Unmarshal(input, &req); err != nil || req.Dir == "" || (req.Kind != api.WorkspaceHost && req.Kind != api.WorkspaceSession) {
		return Decision{Effect: EffectDeny, Rule: RuleBadRequest, Reason: `the workspace tool's input is {"dir": ABSOLUTE_DIR, "kind": "host"|"session"}`}
	}
	g := p.workspace(req)
	if g.Mode == api.WorkspaceNone {
		return Decision{Effect: EffectDeny, Rule: g.Rule, Reason: fmt.Sprintf("runs of skill %q may not use the workspace %s (workspace = \"none\")", skill, req.Dir)}
	}
	for _, r := range p.rules {
		if !r.coversWorkspace(req.Dir) {
			continue
		}
		for _, pat := range r.confirm {
			if pat.name == WorkspaceTool && !pat.hasSpec {
				return Decision{Effect: EffectConfirm, Rule: r.String(),
					Reason: fmt.Sprintf("a run of skill %q in the workspace %s (%s) needs an approver's confirmation", skill, req.Dir, g.Mode)}
			}
		}
	}
	return Decision{Effect: EffectAllow, Rule: g.Rule, Reason: fmt.Sprintf("runs of skill %q may %s the workspace %s", skill, map[string]string{api.WorkspaceRead: "read", api.WorkspaceWrite: "read and write"}[g.Mode], req.Dir)}
}

// workspaceRule decodes a rule's workspace attributes.
func (b *body) workspaceRule(r *Rule) {
	var mode string
	if a := b.str("workspace", &mode); a != nil {
		if _, ok := workspaceRank[mode]; !ok {
			b.bad(a, "is %q; use \"none\", \"read\" or \"write\"", mode)
		} else {
			r.Workspace = mode
		}
	}
	patterns := func(field string, dst *[]string, absolute bool) {
		var ps []string
		a := b.strs(field, &ps)
		if a == nil {
			return
		}
		ok := true
		for _, p := range ps {
			check := p
			if absolute {
				if !strings.HasPrefix(p, "/") {
					b.bad(a, "%q is not an absolute path pattern: write it from / (e.g. \"/home/*/projects/**\")", p)
					ok = false
					continue
				}
				check = strings.TrimPrefix(p, "/")
			}
			if err := workspace.ValidatePattern(check); err != nil {
				b.bad(a, "%q: %v", p, err)
				ok = false
			}
		}
		if ok {
			*dst = append([]string{}, ps...)
		}
	}
	patterns("workspace_paths", &r.WorkspacePaths, true)
	patterns("workspace_excludes", &r.WorkspaceExcludes, false)
	var del bool
	if b.boolean("workspace_delete", &del) != nil {
		r.WorkspaceDelete = &del
	}
}
