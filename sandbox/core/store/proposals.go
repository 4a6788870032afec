package store

// Proposals are changes to skills that agents proposed (skills.propose) and
// approvers review: kept in the state KV so a daemon restart loses none, and
// so the reviewed diff is exactly the stored one.

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// ProposalStore keeps proposals in a KV.
type ProposalStore struct {
	kv  KV
	now func() time.Time
}

// NewProposalStore returns the proposal store over kv.
func NewProposalStore(kv KV) (*ProposalStore, error) {
	return &ProposalStore{kv: kv, now: time.Now}, nil
}

func notFoundProposal(id string) error {
	return errkind.Errorf(errkind.NotFound, "no proposal %q: list them with proposals.list", id)
}

// Create stores a new pending proposal; ID, State and Created are filled in.
func (s *ProposalStore) Create(p *api.Proposal) (*api.Proposal, error) {
	id, err := randomID("prop_")
	if err != nil {
		return nil, err
	}
	p.ID = id
	p.State = api.ProposalPending
	p.Created = s.now().UTC().Round(0)
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("storing proposal: %w", err)
	}
	ctx, cancel := opContext()
	defer cancel()
	err = s.kv.Update(ctx, bucketProposals, id, func(old []byte) ([]byte, error) {
		if old != nil {
			return nil, fmt.Errorf("proposal id %s is taken (random ids collided): propose again: %w", id, errkind.Internal)
		}
		return b, nil
	})
	if err != nil {
		return nil, fmt.Errorf("storing proposal: %w", err)
	}
	return p, nil
}

// Get returns one proposal.
func (s *ProposalStore) Get(id string) (*api.Proposal, error) {
	ctx, cancel := opContext()
	defer cancel()
	v, err := s.kv.Get(ctx, bucketProposals, id)
	if err != nil {
		return nil, fmt.Errorf("reading proposal %q: %w", id, err)
	}
	if v == nil {
		return nil, notFoundProposal(id)
	}
	p := new(api.Proposal)
	if err := json.Unmarshal(v, p); err != nil {
		return nil, fmt.Errorf("corrupt proposal record %q: %w", id, err)
	}
	return p, nil
}

// List returns the proposals matching the filters ("" matches all), oldest first.
func (s *ProposalStore) List(skill, state string) ([]*api.Proposal, error) {
	ctx, cancel := opContext()
	defer cancel()
	all, err := s.kv.List(ctx, bucketProposals)
	if err != nil {
		return nil, fmt.Errorf("listing proposals: %w", err)
	}
	out := []*api.Proposal{}
	for _, e := range all {
		p := new(api.Proposal)
		if err := json.Unmarshal(e.Value, p); err != nil {
			return nil, fmt.Errorf("corrupt proposal record %q: %w", e.Key, err)
		}
		if (skill == "" || p.Skill == skill) && (state == "" || p.State == state) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Decide moves a pending proposal to its decided state as one
// compare-and-swap: fn gets the stored proposal and fills in the outcome (it
// may fail, and then nothing changes; it may run again if another replica
// changed the proposal meanwhile, so it must only fill in fields). A
// proposal that is no longer pending is refused.
func (s *ProposalStore) Decide(id string, fn func(p *api.Proposal) error) (*api.Proposal, error) {
	var out *api.Proposal
	ctx, cancel := opContext()
	defer cancel()
	err := s.kv.Update(ctx, bucketProposals, id, func(v []byte) ([]byte, error) {
		out = nil
		if v == nil {
			return nil, notFoundProposal(id)
		}
		p := new(api.Proposal)
		if err := json.Unmarshal(v, p); err != nil {
			return nil, fmt.Errorf("corrupt proposal record %q: %w", id, err)
		}
		if p.State != api.ProposalPending {
			return nil, errkind.Errorf(errkind.InvalidParams, "proposal %s is already %s", id, p.State)
		}
		if err := fn(p); err != nil {
			return nil, err
		}
		data, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		out = p
		return data, nil
	})
	return out, err
}
