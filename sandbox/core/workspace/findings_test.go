package workspace

import (
	"fmt"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

func TestFindingsAreBounded(t *testing.T) {
	var l []api.WorkspaceFinding
	f := findingList{list: &l}
	for i := 0; i < MaxFindingsNamed+5; i++ {
		f.add("p", "why %d", i)
	}
	if len(l) != MaxFindingsNamed+1 || l[MaxFindingsNamed].Why != "and 5 more paths, not named" {
		t.Errorf("%d findings, last %+v", len(l), l[len(l)-1])
	}
}

// The count past the named findings is kept as a number, whatever the
// last finding's text: the first MaxFindingsNamed are named, in order.
func TestFindingListCounts(t *testing.T) {
	cases := []struct {
		added int
		last  string // the last finding's Why
	}{
		{added: 1, last: "why 0"},
		{added: MaxFindingsNamed, last: fmt.Sprintf("why %d", MaxFindingsNamed-1)},
		{added: MaxFindingsNamed + 1, last: "and 1 more path, not named"},
		{added: MaxFindingsNamed + 2, last: "and 2 more paths, not named"},
		{added: MaxFindingsNamed + 123456, last: "and 123456 more paths, not named"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.added), func(t *testing.T) {
			var l []api.WorkspaceFinding
			f := findingList{list: &l}
			for i := range c.added {
				f.add(fmt.Sprintf("p%d", i), "why %d", i)
			}
			if want := min(c.added, MaxFindingsNamed+1); len(l) != want {
				t.Fatalf("%d findings, want %d", len(l), want)
			}
			if got := l[len(l)-1].Why; got != c.last {
				t.Errorf("last finding %q, want %q", got, c.last)
			}
			for i := range min(c.added, MaxFindingsNamed) {
				if l[i].Path != fmt.Sprintf("p%d", i) {
					t.Fatalf("finding %d is %q", i, l[i].Path)
				}
			}
			if c.added > MaxFindingsNamed && (l[MaxFindingsNamed].Path != "..." || f.more != c.added-MaxFindingsNamed) {
				t.Errorf("tail %+v, more %d", l[MaxFindingsNamed], f.more)
			}
		})
	}
}
