package policy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/skillbox/skillbox/policy/glob"
)

// WorkspaceTool is the pseudo-tool a run with a workspace is decided as:
// denied where policy gives the workspace mode "none", and held for an
// approver where a matching rule lists it in confirm (confirm =
// ["workspace"]).
const WorkspaceTool = "workspace"

// Workspace modes (a rule's workspace = "...") and the kinds of workspace
// a run asks for; the wire (sandbox/api) carries the same words.
const (
	WorkspaceNone    = "none"  // no workspace
	WorkspaceRead    = "read"  // files go in; nothing comes back
	WorkspaceWrite   = "write" // files go in; the run's changes come back
	WorkspaceHost    = "host"
	WorkspaceSession = "session"
)

// Rule names of the workspace defaults.
const (
	RuleWorkspaceHostDefault    = "default: a host workspace is read-only (no matching rule sets workspace)"
	RuleWorkspaceSessionDefault = "default: the session workspace is writable (no matching rule sets workspace)"
)

// WorkspaceRequest is the input of the workspace pseudo-tool: which
// workspace a run asks for.
type WorkspaceRequest struct {
	Dir  string `json:"dir"`  // the host directory (absolute, cleaned)
	Kind string `json:"kind"` // WorkspaceHost or WorkspaceSession
}

// WorkspaceGrant is what policy lets the runs of a skill do with one
// workspace.
type WorkspaceGrant struct {
	Mode string // WorkspaceNone, WorkspaceRead or WorkspaceWrite
	// Delete: the run's deletions are applied (else reported).
	Delete bool
	// Excludes are the patterns (glob.Match) of paths neither copied
	// in nor written back.
	Excludes []string
	// Rule names the rule that set the mode, or the default.
	Rule string
}

// workspaceRank orders the modes from the strictest.
var workspaceRank = map[string]int{WorkspaceNone: 0, WorkspaceRead: 1, WorkspaceWrite: 2}

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
	g := WorkspaceGrant{Mode: WorkspaceRead, Rule: RuleWorkspaceHostDefault}
	deleteYes, deleteNo := false, false
	if req.Kind == WorkspaceSession {
		g = WorkspaceGrant{Mode: WorkspaceWrite, Rule: RuleWorkspaceSessionDefault}
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
	g.Delete = deleteYes && !deleteNo && g.Mode == WorkspaceWrite
	if excludes == nil {
		excludes = DefaultWorkspaceExcludes
	}
	g.Excludes = excludes
	return g
}

// DefaultWorkspaceExcludes are the paths no run sees or writes unless a
// rule lists its own workspace_excludes: version control, environment
// files, keys, certificates and key stores.
var DefaultWorkspaceExcludes = glob.DefaultExcludes

// coversWorkspace says whether the rule's workspace_paths cover dir.
func (r *Rule) coversWorkspace(dir string) bool {
	if len(r.WorkspacePaths) == 0 {
		return true
	}
	rel := strings.TrimPrefix(filepath.ToSlash(filepath.Clean(dir)), "/")
	for _, p := range r.WorkspacePaths {
		if glob.Match(strings.TrimPrefix(p, "/"), rel) {
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
	if err := json.Unmarshal(input, &req); err != nil || req.Dir == "" || (req.Kind != WorkspaceHost && req.Kind != WorkspaceSession) {
		return Decision{Effect: EffectDeny, Rule: RuleBadRequest, Reason: `the workspace tool's input is {"dir": ABSOLUTE_DIR, "kind": "host"|"session"}`}
	}
	g := p.workspace(req)
	if g.Mode == WorkspaceNone {
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
	return Decision{Effect: EffectAllow, Rule: g.Rule, Reason: fmt.Sprintf("runs of skill %q may %s the workspace %s", skill, map[string]string{WorkspaceRead: "read", WorkspaceWrite: "read and write"}[g.Mode], req.Dir)}
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
			if err := glob.Validate(check); err != nil {
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
