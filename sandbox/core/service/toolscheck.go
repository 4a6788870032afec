package service

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/store"
)

// CheckTool implements api.Service: may the host call one of its own tools
// while the session's skills are active? The strictest decision of the
// active skills wins.
func (s *Service) CheckTool(ctx context.Context, caller api.Peer, p api.CheckToolParams) (*api.CheckToolResult, error) {
	if p.Tool == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "tool is required, e.g. \"Bash\" or \"skills.run_script\"")
	}
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	best, err := s.decideHostTool(ctx, caller, api.MethodToolsCheck, ses, p.Tool, p.Input)
	if err != nil {
		return nil, err
	}
	if len(ses.Active) > 0 && best.Effect != policy.EffectDeny {
		// Hooks may narrow what policy allows, never widen it.
		hd, err := s.preToolUseHooks(ctx, caller, ses, p)
		if err != nil {
			return nil, err
		}
		best = policy.Strictest(append([]policy.Decision{best}, hd...)...)
	}
	return &api.CheckToolResult{Decision: string(best.Effect), Rule: best.Rule, Reason: best.Why()}, nil
}

// decideHostTool is policy's decision on a host's tool call while the
// session's skills are active (tools.check, tools.report): the strictest of
// the active skills' decisions, each audited.
func (s *Service) decideHostTool(ctx context.Context, caller api.Peer, method string, ses *store.Session, tool string, input json.RawMessage) (policy.Decision, error) {
	if len(ses.Active) == 0 {
		return policy.Decision{Effect: policy.EffectAllow, Rule: "no skills are active in this session",
			Reason: "tools.check only constrains tools while skills are loaded"}, nil
	}
	// A loaded skill that is gone or changed on disk cannot vouch for
	// anything: fail closed until it is unloaded or loaded again.
	var decs []policy.Decision
	for _, a := range ses.Active {
		sk, err := s.skills.Get(a.Name)
		if err != nil {
			decs = append(decs, policy.Decision{Effect: policy.EffectDeny, Rule: fmt.Sprintf("skill %q", a.Name),
				Reason: fmt.Sprintf("skill %q is loaded but no longer available; unload it (skills.unload)", a.Name)})
			continue
		}
		if sk.Digest != a.Digest {
			decs = append(decs, policy.Decision{Effect: policy.EffectDeny, Rule: fmt.Sprintf("skill %q", a.Name),
				Reason: fmt.Sprintf("skill %q changed on disk since it was loaded; load it again (skills.load)", a.Name)})
			continue
		}
		dec, err := s.decide(ctx, sk, s.cfg.For(sk.Name), tool, input, *base(ctx, caller, method, audit.EventDecision, ses.ID))
		if err != nil {
			return policy.Decision{}, err
		}
		decs = append(decs, dec)
	}
	return policy.Strictest(decs...), nil
}
