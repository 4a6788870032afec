package store

// Proposals are changes to skills that agents proposed (skills.propose) and
// approvers review: kept in the state database so a daemon restart loses
// none, and so the reviewed diff is exactly the stored one.

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

var bucketProposals = []byte("proposals")

// ProposalStore keeps proposals in the state database.
type ProposalStore struct {
	st  *StateDB
	now func() time.Time
}

// NewProposalStore returns the proposal store over st (creating its bucket).
func NewProposalStore(st *StateDB) (*ProposalStore, error) {
	err := st.db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketProposals)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("initialising proposals: %w", err)
	}
	return &ProposalStore{st: st, now: time.Now}, nil
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
	err = s.st.db.Update(func(tx *bolt.Tx) error {
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketProposals).Put([]byte(p.ID), b)
	})
	if err != nil {
		return nil, fmt.Errorf("storing proposal: %w", err)
	}
	return p, nil
}

// Get returns one proposal.
func (s *ProposalStore) Get(id string) (*api.Proposal, error) {
	var p *api.Proposal
	err := s.st.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketProposals).Get([]byte(id))
		if v == nil {
			return errkind.Errorf(api.ErrNotFound, "no proposal %q: list them with proposals.list", id)
		}
		p = new(api.Proposal)
		return json.Unmarshal(v, p)
	})
	return p, err
}

// List returns the proposals matching the filters ("" matches all), oldest first.
func (s *ProposalStore) List(skill, state string) ([]*api.Proposal, error) {
	out := []*api.Proposal{}
	err := s.st.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketProposals).ForEach(func(_, v []byte) error {
			p := new(api.Proposal)
			if err := json.Unmarshal(v, p); err != nil {
				return err
			}
			if (skill == "" || p.Skill == skill) && (state == "" || p.State == state) {
				out = append(out, p)
			}
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, err
}

// Decide moves a pending proposal to its decided state in one transaction:
// fn gets the stored proposal and fills in the outcome (it may fail, and
// then nothing changes). A proposal that is no longer pending is refused.
func (s *ProposalStore) Decide(id string, fn func(p *api.Proposal) error) (*api.Proposal, error) {
	var out *api.Proposal
	err := s.st.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketProposals)
		v := b.Get([]byte(id))
		if v == nil {
			return errkind.Errorf(api.ErrNotFound, "no proposal %q: list them with proposals.list", id)
		}
		p := new(api.Proposal)
		if err := json.Unmarshal(v, p); err != nil {
			return err
		}
		if p.State != api.ProposalPending {
			return errkind.Errorf(api.ErrInvalidParams, "proposal %s is already %s", id, p.State)
		}
		if err := fn(p); err != nil {
			return err
		}
		data, err := json.Marshal(p)
		if err != nil {
			return err
		}
		out = p
		return b.Put([]byte(id), data)
	})
	return out, err
}
