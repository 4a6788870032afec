package process

import "github.com/skillbox/skillbox/runtime"

// finalReason decides why a run ended from what the engine saw (its timer,
// the output and egress caps, the caller's cancel) and the cgroup's event
// counters. The precedence, first match wins:
//
//  1. cancelled, killed: the caller stopped the run; that is why it ended,
//     whatever limit it was running into meanwhile.
//  2. pids: pids.max refused a fork at any time during the run. That is the
//     mark of a fork bomb, and a fork bomb runs into every other limit too:
//     its copies fill the memory limit (the kernel OOM-kills some), its
//     parent waits on until the timer kills it, its error messages flood
//     the output cap. Whichever of those ended it, it is reported as the
//     fork bomb it is. A run whose forks were never refused is not "pids".
//  3. the engine's limits (timeout, output_cap, egress_cap): the limit that
//     stopped the run names it, so a process the kernel OOM-killed on the
//     way does not turn a timeout into "oom".
//  4. oom: the run ended on its own after the kernel OOM-killed a process.
//  5. exit.
func finalReason(reason runtime.Reason, ev CgroupEvents) runtime.Reason {
	switch reason {
	case runtime.ReasonCancelled, runtime.ReasonKilled:
		return reason
	}
	switch {
	case ev.PidsMax > 0:
		return runtime.ReasonPids
	case reason != runtime.ReasonExit:
		return reason
	case ev.OOMKills > 0:
		return runtime.ReasonOOM
	}
	return reason
}
