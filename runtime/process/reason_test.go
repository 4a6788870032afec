package process

import (
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// Which reason a run gets from what the engine saw and the cgroup's
// counters (finalReason's precedence). A fork bomb is "pids"
// whenever pids.max refused a fork, also when memory ran out first (the
// kernel OOM-killed some of its copies) or the timer or the output cap
// stopped it; a timeout or an OOM kill without a refused fork keeps its own
// name; the caller's cancel is what it is.
func TestReasonByWhatTriggered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason runtime.Reason
		ev     CgroupEvents
		want   runtime.Reason
	}{
		{"exit", runtime.ReasonExit, CgroupEvents{}, runtime.ReasonExit},
		{"ended after a refused fork", runtime.ReasonExit, CgroupEvents{PidsMax: 3}, runtime.ReasonPids},
		{"ended after an OOM kill", runtime.ReasonExit, CgroupEvents{OOMKills: 1}, runtime.ReasonOOM},
		{"memory ran out before pids", runtime.ReasonExit, CgroupEvents{OOMKills: 2, PidsMax: 1, MemFail: 40}, runtime.ReasonPids},
		{"fork bomb stopped by the timer", runtime.ReasonTimeout, CgroupEvents{PidsMax: 100}, runtime.ReasonPids},
		{"fork bomb stopped by the timer after OOM kills", runtime.ReasonTimeout, CgroupEvents{PidsMax: 100, OOMKills: 3}, runtime.ReasonPids},
		{"fork bomb stopped by the output cap", runtime.ReasonOutputCap, CgroupEvents{PidsMax: 1}, runtime.ReasonPids},
		{"fork bomb stopped by the egress cap", runtime.ReasonEgressCap, CgroupEvents{PidsMax: 1}, runtime.ReasonPids},
		{"timeout without a refused fork", runtime.ReasonTimeout, CgroupEvents{}, runtime.ReasonTimeout},
		{"timeout after an OOM kill", runtime.ReasonTimeout, CgroupEvents{OOMKills: 1}, runtime.ReasonTimeout},
		{"output cap after an OOM kill", runtime.ReasonOutputCap, CgroupEvents{OOMKills: 1}, runtime.ReasonOutputCap},
		{"caller killed a run that hit memory", runtime.ReasonKilled, CgroupEvents{OOMKills: 1}, runtime.ReasonKilled},
		{"caller killed a fork bomb", runtime.ReasonKilled, CgroupEvents{PidsMax: 5}, runtime.ReasonKilled},
		{"caller cancelled a fork bomb", runtime.ReasonCancelled, CgroupEvents{PidsMax: 5}, runtime.ReasonCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := finalReason(tc.reason, tc.ev); got != tc.want {
				t.Errorf("finalReason(%s, %+v) = %s, want %s", tc.reason, tc.ev, got, tc.want)
			}
		})
	}
}
