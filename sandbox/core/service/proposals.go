package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/skills"
)

// Agents propose changes to a skill instead of writing to it: a unified
// diff against the version loaded in their session, with a justification.
// An approver reviews the stored diff and approves (it is applied to the
// skill, atomically per file, or exported as a patch when the skill's root
// is read-only) or rejects it. A proposal made against a version that is no
// longer current is refused. Every step is audited.

// Audit events of proposals.
const (
	EventProposalCreate  = "proposal.create"
	EventProposalApprove = "proposal.approve"
	EventProposalReject  = "proposal.reject"
)

// Caps on what a proposal carries besides its diff.
const (
	maxJustification = 8 << 10
	maxEvidence      = 64 << 10
)

// patchOptions is how strictly a proposed SKILL.md is checked: what
// indexing accepts, so a proposal is not refused over a cosmetic problem
// the skill already had; an unusable name, description or hooks field is.
var patchOptions = skills.LoadOptions{AllowExtensions: true, Lenient: true}

func (s *Service) proposalStore() error {
	if s.proposals == nil {
		return errkind.Errorf(errkind.Unavailable, "this skillbox keeps no proposals (use the daemon)")
	}
	return nil
}

// ProposeChange implements api.Service.
func (s *Service) ProposeChange(ctx context.Context, caller api.Peer, p api.ProposeParams) (*api.Proposal, error) {
	const method = api.MethodSkillsPropose
	if err := s.proposalStore(); err != nil {
		return nil, err
	}
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	if p.Skill == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "skill is required: name the loaded skill the diff changes")
	}
	switch {
	case strings.TrimSpace(p.Justification) == "":
		return nil, errkind.Errorf(errkind.InvalidParams, "justification is required: say why the skill should change, for the approver")
	case len(p.Justification) > maxJustification:
		return nil, errkind.Errorf(errkind.InvalidParams, "justification is %d bytes, at most %d", len(p.Justification), maxJustification)
	case len(p.Evidence) > maxEvidence:
		return nil, errkind.Errorf(errkind.InvalidParams, "evidence is %d bytes, at most %d", len(p.Evidence), maxEvidence)
	}
	// The base is the version loaded in the session; a skill that changed
	// since is refused here (load it again and diff against the new one).
	sk, err := s.activeSkill(ses, p.Skill)
	if err != nil {
		return nil, err
	}
	rec := base(ctx, caller, method, EventProposalCreate, p.SessionID)
	rec.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
	rec.Detail = map[string]string{"diff_sha256": runner.SHA256Hex([]byte(p.Diff)), "diff_bytes": fmt.Sprint(len(p.Diff))}
	patch, err := skills.ApplyDiff(sk.Dir, p.Diff, patchOptions)
	if err != nil {
		rec.Outcome, rec.Error = audit.OutcomeRefused, err.Error()
		err = errkind.Errorf(errkind.InvalidParams, "%w; make the diff against skill %q as loaded (%s) with skills.read", err, sk.Name, sk.Digest)
		if s.record(ctx, rec) == nil {
			err = api.MarkAudited(err)
		}
		return nil, err
	}
	prop, err := s.proposals.Create(&api.Proposal{
		Skill: sk.Name, BaseDigest: sk.Digest, Diff: p.Diff, Files: patch.Paths(),
		Justification: p.Justification, Evidence: p.Evidence, SessionID: p.SessionID, ProposedBy: caller,
	})
	if err != nil {
		return nil, errkind.Wrap(errkind.Internal, err)
	}
	rec.Outcome = api.ProposalPending
	rec.Detail["proposal"] = prop.ID
	rec.Detail["files"] = strings.Join(prop.Files, " ")
	if err := s.record(ctx, rec); err != nil {
		return nil, err
	}
	return prop, nil
}

// ListProposals implements api.Service: approvers see every proposal,
// others their own; diffs are left out (proposals.show has them).
func (s *Service) ListProposals(ctx context.Context, caller api.Peer, p api.ListProposalsParams) (*api.ListProposalsResult, error) {
	if err := s.proposalStore(); err != nil {
		return nil, err
	}
	all, err := s.proposals.List(p.Skill, p.State)
	if err != nil {
		return nil, errkind.Wrap(errkind.Internal, err)
	}
	approver := s.IsApprover(caller)
	out := []*api.Proposal{}
	for _, pr := range all {
		if approver || pr.ProposedBy.UID == caller.UID {
			pr.Diff = ""
			out = append(out, pr)
		}
	}
	return &api.ListProposalsResult{Proposals: out}, nil
}

// ShowProposal implements api.Service.
func (s *Service) ShowProposal(ctx context.Context, caller api.Peer, p api.ProposalIDParams) (*api.Proposal, error) {
	if err := s.proposalStore(); err != nil {
		return nil, err
	}
	pr, err := s.proposals.Get(p.ID)
	if err != nil {
		return nil, err
	}
	if !s.IsApprover(caller) && pr.ProposedBy.UID != caller.UID {
		return nil, errkind.Errorf(errkind.NotFound, "no proposal %q: list them with proposals.list", p.ID)
	}
	return pr, nil
}

// refuseProposal audits a refused decision on a proposal and returns err marked.
func (s *Service) refuseProposal(ctx context.Context, rec *audit.Record, err error) error {
	rec.Outcome, rec.Error = audit.OutcomeRefused, err.Error()
	if s.record(ctx, rec) == nil {
		return api.MarkAudited(err)
	}
	return err
}

// RejectProposal implements api.Service.
func (s *Service) RejectProposal(ctx context.Context, caller api.Peer, p api.ProposalIDParams) (*api.Proposal, error) {
	if err := s.proposalStore(); err != nil {
		return nil, err
	}
	rec := base(ctx, caller, api.MethodProposalsReject, EventProposalReject, "")
	rec.Detail = map[string]string{"proposal": p.ID}
	if !s.IsApprover(caller) {
		return nil, s.refuseProposal(ctx, rec, errkind.Errorf(errkind.Denied, "uid %d is not an approver: the config's daemon.approvers names who may decide proposals", caller.UID))
	}
	now := time.Now().UTC()
	pr, err := s.proposals.Decide(p.ID, func(pr *api.Proposal) error {
		pr.State, pr.DecidedBy, pr.DecidedAt, pr.Note = api.ProposalRejected, &caller, &now, p.Note
		return nil
	})
	if err != nil {
		return nil, s.refuseProposal(ctx, rec, err)
	}
	rec.SessionID = pr.SessionID
	rec.Skill = &audit.SkillRef{Name: pr.Skill, Digest: pr.BaseDigest}
	rec.Outcome = api.ProposalRejected
	if p.Note != "" {
		rec.Detail["note"] = audit.ClipText(p.Note, 1024)
	}
	if err := s.record(ctx, rec); err != nil {
		return nil, err
	}
	return pr, nil
}

// ApproveProposal implements api.Service: the diff is checked again
// against the skill as it is now (a proposal whose base digest is no longer
// current is refused), then applied to the skill's directory, or exported
// as <state_dir>/proposals/ID.patch when the root is read-only. When the
// skill is pinned in the lock file, the lock moves to the new digest in
// the same step.
func (s *Service) ApproveProposal(ctx context.Context, caller api.Peer, p api.ProposalIDParams) (*api.Proposal, error) {
	const method = api.MethodProposalsApprove
	if err := s.proposalStore(); err != nil {
		return nil, err
	}
	rec := base(ctx, caller, method, EventProposalApprove, "")
	rec.Detail = map[string]string{"proposal": p.ID}
	if !s.IsApprover(caller) {
		return nil, s.refuseProposal(ctx, rec, errkind.Errorf(errkind.Denied, "uid %d is not an approver: the config's daemon.approvers names who may decide proposals", caller.UID))
	}
	unlock, err := s.lockSkills(ctx)
	if err != nil {
		return nil, s.refuseProposal(ctx, rec, err)
	}
	defer unlock()
	pr, err := s.proposals.Get(p.ID)
	if err != nil {
		return nil, s.refuseProposal(ctx, rec, err)
	}
	rec.SessionID = pr.SessionID
	rec.Skill = &audit.SkillRef{Name: pr.Skill, Digest: pr.BaseDigest}
	if pr.State != api.ProposalPending {
		return nil, s.refuseProposal(ctx, rec, errkind.Errorf(errkind.InvalidParams, "proposal %s is already %s", pr.ID, pr.State))
	}
	sk, err := s.skills.Get(pr.Skill)
	if err != nil {
		return nil, s.refuseProposal(ctx, rec, err)
	}
	if sk.Digest != pr.BaseDigest {
		return nil, s.refuseProposal(ctx, rec, errkind.Errorf(errkind.InvalidParams, "proposal %s is stale: it was made against %s but skill %q is now %s; reject it and ask for a new proposal against the current version", pr.ID, pr.BaseDigest, sk.Name, sk.Digest))
	}
	patch, err := skills.ApplyDiff(sk.Dir, pr.Diff, patchOptions)
	if err != nil {
		return nil, s.refuseProposal(ctx, rec, errkind.Wrap(errkind.InvalidParams, err))
	}
	if err := s.journal.Check(); err != nil {
		return nil, err
	}
	state, patchFile, newDigest := api.ProposalApplied, "", ""
	var pinned *skills.Skill
	switch err := patch.WriteTo(sk.Dir); {
	case errors.Is(err, skills.ErrReadOnly):
		state = api.ProposalExported
		if patchFile, err = s.exportPatch(pr); err != nil {
			return nil, s.refuseProposal(ctx, rec, errkind.Errorf(errkind.Internal, "the skill's root is read-only and the patch could not be exported: %w", err))
		}
	case err != nil:
		return nil, s.refuseProposal(ctx, rec, errkind.Errorf(errkind.Internal, "applying proposal %s to %s: %w", pr.ID, sk.Dir, err))
	default:
		if rl, ok := s.skills.(Reloader); ok {
			if err := rl.Reload(ctx); err != nil {
				s.log.Warn("reloading skills after applying a proposal", "error", err)
			}
		}
		cur, err := skills.Digest(sk.Dir)
		if err != nil {
			return nil, errkind.Errorf(errkind.Internal, "hashing skill %q after the change: %w", sk.Name, err)
		}
		newDigest = cur
		if nsk, err := s.skills.Get(sk.Name); err == nil && nsk.Digest == cur {
			pinned = nsk
		}
	}
	lockUpdated := false
	if pinned != nil && s.isPinned(sk.Name) {
		if _, err := s.pin(ctx, caller, method, pr.ID, []*skills.Skill{pinned}); err != nil {
			return nil, err
		}
		lockUpdated = true
	}
	now := time.Now().UTC()
	pr, err = s.proposals.Decide(p.ID, func(pr *api.Proposal) error {
		pr.State, pr.DecidedBy, pr.DecidedAt, pr.Note = state, &caller, &now, p.Note
		pr.NewDigest, pr.PatchFile, pr.LockUpdated = newDigest, patchFile, lockUpdated
		return nil
	})
	if err != nil {
		return nil, s.refuseProposal(ctx, rec, err)
	}
	rec.Outcome = state
	rec.Detail["files"] = strings.Join(pr.Files, " ")
	if newDigest != "" {
		rec.Detail["new_digest"] = newDigest
	}
	if patchFile != "" {
		rec.Detail["patch_file"] = patchFile
	}
	if lockUpdated {
		rec.Detail["lock_file"] = s.cfg.Skills.LockFile
	}
	if err := s.record(ctx, rec); err != nil {
		return nil, err
	}
	return pr, nil
}

// isPinned reports whether the lock file pins name.
func (s *Service) isPinned(name string) bool {
	l, err := s.locks.get(s.cfg.Skills.LockFile)
	if err != nil || l == nil {
		return false
	}
	_, ok := l.Skills[name]
	return ok
}

// exportPatch writes an approved proposal's diff for a read-only root.
// The directory is root's alone (0700), the patch 0600: a diff may hold
// what a skill's author has not published yet.
func (s *Service) exportPatch(pr *api.Proposal) (string, error) {
	dir := filepath.Join(s.cfg.Daemon.StateDir, "proposals")
	if err := oci.MakePrivateDir(dir, "proposals directory"); err != nil {
		return "", err
	}
	path := filepath.Join(dir, pr.ID+".patch")
	head := fmt.Sprintf("# skillbox proposal %s for skill %q against %s\n# %s\n", pr.ID, pr.Skill, pr.BaseDigest,
		strings.ReplaceAll(audit.ClipText(pr.Justification, 2048), "\n", "\n# "))
	return path, os.WriteFile(path, []byte(head+pr.Diff), 0o600)
}
