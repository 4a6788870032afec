package store

import (
	"errors"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

func TestProposalStore(t *testing.T) {
	forBackends(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		st := be.open(t, dir)
		ps, err := NewProposalStore(st)
		if err != nil {
			t.Fatal(err)
		}
		a, err := ps.Create(&api.Proposal{Skill: "pdf", BaseDigest: "sha256:1", Diff: "d", Justification: "j"})
		if err != nil || a.State != api.ProposalPending || a.ID == "" {
			t.Fatalf("create: %+v %v", a, err)
		}
		b, _ := ps.Create(&api.Proposal{Skill: "docx", BaseDigest: "sha256:2", Diff: "d", Justification: "j"})

		for _, tc := range []struct {
			skill, state string
			want         int
		}{{"", "", 2}, {"pdf", "", 1}, {"", api.ProposalPending, 2}, {"", api.ProposalApplied, 0}} {
			if l, err := ps.List(tc.skill, tc.state); err != nil || len(l) != tc.want {
				t.Errorf("List(%q, %q) = %d, %v; want %d", tc.skill, tc.state, len(l), err, tc.want)
			}
		}

		// A failing decision changes nothing.
		if _, err := ps.Decide(a.ID, func(*api.Proposal) error { return errors.New("no") }); err == nil {
			t.Fatal("Decide ignored fn's error")
		}
		if p, _ := ps.Get(a.ID); p.State != api.ProposalPending {
			t.Fatalf("state after a failed decision: %s", p.State)
		}
		if _, err := ps.Decide(a.ID, func(p *api.Proposal) error { p.State = api.ProposalApplied; return nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := ps.Decide(a.ID, func(p *api.Proposal) error { p.State = api.ProposalRejected; return nil }); !errors.Is(err, api.ErrInvalidParams) {
			t.Errorf("deciding twice: %v", err)
		}
		if _, err := ps.Get("prop_nope"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("Get of a missing proposal: %v", err)
		}

		// A restart keeps them.
		st.Close()
		st2 := be.open(t, dir)
		defer st2.Close()
		ps2, err := NewProposalStore(st2)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := ps2.Get(a.ID); err != nil || p.State != api.ProposalApplied {
			t.Errorf("after reopening: %+v %v", p, err)
		}
		if p, err := ps2.Get(b.ID); err != nil || p.Skill != "docx" || p.Diff != "d" {
			t.Errorf("after reopening: %+v %v", p, err)
		}
	})
}
