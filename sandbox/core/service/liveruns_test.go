package service

import (
	"testing"
	"time"
)

// TestRunRegistryList: an approver's list has every live run, anyone
// else's its own; oldest first; cancel reaches the owner's run only.
func TestRunRegistryList(t *testing.T) {
	r := runRegistry{runs: map[string]*activeRun{}}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cancelled := map[string]bool{}
	for _, run := range []LiveRun{
		{RunID: "run_b", UID: 1000, Started: t0.Add(time.Second)},
		{RunID: "run_a", UID: 0, Started: t0},
		{RunID: "run_c", UID: 1000, Started: t0.Add(2 * time.Second)},
	} {
		id := run.RunID
		r.add(run, func(error) { cancelled[id] = true })
	}
	for _, tc := range []struct {
		name string
		all  bool
		uid  uint32
		want []string
	}{
		{"approver", true, 0, []string{"run_a", "run_b", "run_c"}},
		{"owner", false, 1000, []string{"run_b", "run_c"}},
		{"someone else", false, 65534, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, l := range r.list(tc.all, tc.uid) {
				got = append(got, l.RunID)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("list = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("list = %v, want %v", got, tc.want)
				}
			}
		})
	}
	if r.cancel("run_b", 65534) || cancelled["run_b"] {
		t.Error("another uid cancelled run_b")
	}
	if !r.cancel("run_b", 1000) || !cancelled["run_b"] {
		t.Error("the owner could not cancel run_b")
	}
	r.remove("run_b")
	if got := r.list(true, 0); len(got) != 2 {
		t.Errorf("after remove: %v", got)
	}
}
