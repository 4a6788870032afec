package runtime

// finalReason decides why a run ended from what the engine saw (its timer,
// the output caps, the caller's cancel) and the cgroup's event counters.
// The limit that actually stopped the run wins: a fork bomb the timer
// killed ran into pids.max all along, but it ended because of the time
// limit, so it is "timeout"; "pids" and "oom" name runs that ended on their
// own after the kernel refused a fork or killed a process.
func finalReason(reason Reason, ev cgroupEvents) Reason {
	if reason != ReasonExit {
		return reason
	}
	switch {
	case ev.OOMKills > 0:
		return ReasonOOM
	case ev.PidsMax > 0:
		return ReasonPids
	}
	return reason
}
