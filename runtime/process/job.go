package process

import (
	"context"
	"fmt"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/oci"
)

// Admit is how every backend's Deliver begins: runtime.Accept's checks of
// inv against the sandbox's spec, the normal CPU weight back for a sandbox
// that waited in the background (cgroup is its cgroup), and the job's
// inputs written into the bundle (with the output caps CollectOutputs
// applies later).
func Admit(ctx context.Context, spec runtime.SandboxSpec, inv runtime.Invocation, cgroup string, b *oci.Bundle) (runtime.Job, error) {
	job, err := runtime.Accept(ctx, spec, inv)
	if err != nil {
		return runtime.Job{}, err
	}
	if spec.Background {
		if err := SetBackgroundWeight(cgroup, false); err != nil {
			return runtime.Job{}, fmt.Errorf("restore the CPU weight of sandbox %s: %w", spec.ID, err)
		}
	}
	if err := b.WriteInputs(job); err != nil {
		return runtime.Job{}, err
	}
	return job, nil
}

// Ends is what may end a job before it exits by itself.
type Ends struct {
	// Left is the time left until the job's wall-clock limit.
	Left time.Duration
	// StdoutOver and StderrOver close when a stream passes its cap.
	StdoutOver, StderrOver <-chan struct{}
	// Egress is the sandbox's egress (nil: none), over its cap when Over
	// closes.
	Egress *egress.Egress
}

// AwaitEnd waits until the job exits (exit delivers; exited is true and
// v is what it delivered) or something in ends, or the caller's ctx,
// ends it first (reason says what; the backend then stops the job, the
// graceful way for a timeout).
func AwaitEnd[T any](ctx context.Context, exit <-chan T, ends Ends) (v T, exited bool, reason runtime.Reason) {
	timer := time.NewTimer(ends.Left)
	defer timer.Stop()
	var egressOver <-chan struct{} // nil: never ready
	if ends.Egress != nil {
		egressOver = ends.Egress.Over()
	}
	select {
	case v = <-exit:
		return v, true, runtime.ReasonExit
	case <-egressOver:
		return v, false, runtime.ReasonEgressCap
	case <-timer.C:
		return v, false, runtime.ReasonTimeout
	case <-ends.StdoutOver:
		return v, false, runtime.ReasonOutputCap
	case <-ends.StderrOver:
		return v, false, runtime.ReasonOutputCap
	case <-ctx.Done():
		return v, false, runtime.ReasonKilled
	}
}

// FinishEgress closes the run's egress (nil: none) once the job is over,
// waiting until every connection has been reported, and returns its
// figures with the reason, which turns to egress_cap when a job that
// exited by itself had hit an egress cap on the way.
func FinishEgress(eg *egress.Egress, reason runtime.Reason) (*egress.Stats, runtime.Reason) {
	if eg == nil {
		return nil, reason
	}
	st := eg.Shutdown()
	return &st, EgressReason(reason, st)
}

// EgressReason is the reason of a run whose egress ended with st: a job
// that exited by itself after hitting an egress cap ended by egress_cap.
func EgressReason(reason runtime.Reason, st egress.Stats) runtime.Reason {
	if reason == runtime.ReasonExit && st.LimitHit != "" {
		return runtime.ReasonEgressCap
	}
	return reason
}
