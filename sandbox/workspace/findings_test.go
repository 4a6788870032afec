package workspace

import (
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

func TestFindingsAreBounded(t *testing.T) {
	var l []api.WorkspaceFinding
	for i := 0; i < MaxFindingsNamed+5; i++ {
		addFinding(&l, "p", "why %d", i)
	}
	if len(l) != MaxFindingsNamed+1 || l[MaxFindingsNamed].Why != "and 5 more paths, not named" {
		t.Errorf("%d findings, last %+v", len(l), l[len(l)-1])
	}
}
