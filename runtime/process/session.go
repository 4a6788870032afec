package process

import (
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
)

// ReadCgroupEvents reads the OOM and pids counters of cgroup p, for a
// session sandbox whose counters run across many runs: a run's own events
// are the difference (SessionEndReason).
func ReadCgroupEvents(p string) CgroupEvents { return readCgroupEvents(p) }

// SessionEndReason is EndReason for one run of a session sandbox: the
// cgroup's counters count from before, when the run started.
func SessionEndReason(reason runtime.Reason, out, errc *oci.Capture, cgPath string, before CgroupEvents) (runtime.Reason, CgroupEvents) {
	if reason == runtime.ReasonExit && (isClosed(out.Over) || isClosed(errc.Over)) {
		reason = runtime.ReasonOutputCap
	}
	now := readCgroupEvents(cgPath)
	ev := CgroupEvents{OOMKills: now.OOMKills - before.OOMKills, MemFail: now.MemFail - before.MemFail, PidsMax: now.PidsMax - before.PidsMax}
	return finalReason(reason, ev), ev
}
