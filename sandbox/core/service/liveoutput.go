package service

import (
	"context"
	"io"
	"sync"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
)

// A live run's output, for whoever follows it (the console's Live runs
// page): every run tees its stdout and stderr into a runFeed. The feed
// keeps the newest outputRingBytes for followers that join late, and gives
// each follower a queue of at most followerQueueBytes. The run never
// waits for a follower: what a slow follower cannot take is dropped, and
// it is told how much (a run.output_dropped event) before the next chunk
// it gets. Memory is bounded by the ring plus one queue per follower.
const (
	outputRingBytes    = 64 << 10
	followerQueueBytes = 256 << 10
	maxFollowersPerRun = 16
)

// runFeed is one run's output as events: run.started, run.output (seq
// numbered over both streams), run.exited at the end.
type runFeed struct {
	mu        sync.Mutex
	started   api.RunStartedEvent
	ring      []api.RunOutputEvent
	ringBytes int
	// evicted counts what left the ring, for a late follower's notice.
	evictedEvents uint64
	evictedBytes  int64
	seq           uint64
	end           *api.RunExitedEvent
	followers     map[*RunFollower]struct{}
}

func newRunFeed(started api.RunStartedEvent) *runFeed {
	return &runFeed{started: started, followers: map[*RunFollower]struct{}{}}
}

// sink is the runtime.StreamSink of one stream; it never blocks on a
// follower.
func (f *runFeed) sink(stream string) runner.StreamFunc {
	return func(p []byte) (int, error) {
		if len(p) > 0 {
			f.publish(stream, p)
		}
		return len(p), nil
	}
}

func (f *runFeed) publish(stream string, p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.end != nil {
		return
	}
	f.seq++
	ev := api.RunOutputEvent{RunID: f.started.RunID, Stream: stream, Seq: f.seq, Data: string(p)}
	f.ring = append(f.ring, ev)
	f.ringBytes += len(p)
	for f.ringBytes > outputRingBytes && len(f.ring) > 1 {
		f.ringBytes -= len(f.ring[0].Data)
		f.evictedEvents++
		f.evictedBytes += int64(len(f.ring[0].Data))
		f.ring[0] = api.RunOutputEvent{}
		f.ring = f.ring[1:]
	}
	for fl := range f.followers {
		fl.offer(ev)
	}
}

// finish ends the feed with the run's end; followers get it after what
// they have queued, and then the end of their stream.
func (f *runFeed) finish(end api.RunExitedEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.end != nil {
		return
	}
	f.end = &end
	for fl := range f.followers {
		fl.close(&end)
	}
}

// follow adds a follower: it starts with run.started, a notice of what
// left the ring before it joined, and the ring.
func (f *runFeed) follow() (*RunFollower, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.end == nil && len(f.followers) >= maxFollowersPerRun {
		return nil, errkind.Errorf(errkind.LimitExceeded, "run %q already has %d followers; close one and try again", f.started.RunID, maxFollowersPerRun)
	}
	fl := &RunFollower{feed: f, ready: make(chan struct{}, 1)}
	fl.queue = append(fl.queue, f.started)
	if f.evictedEvents > 0 {
		fl.queue = append(fl.queue, api.RunOutputDroppedEvent{RunID: f.started.RunID, Events: f.evictedEvents, Bytes: f.evictedBytes})
	}
	for _, ev := range f.ring {
		fl.offer(ev)
	}
	if f.end != nil {
		fl.close(f.end)
		return fl, nil
	}
	f.followers[fl] = struct{}{}
	return fl, nil
}

func (f *runFeed) unfollow(fl *RunFollower) {
	f.mu.Lock()
	delete(f.followers, fl)
	f.mu.Unlock()
}

// RunFollower receives one live run's output events (FollowRun).
type RunFollower struct {
	feed  *runFeed
	ready chan struct{}

	mu          sync.Mutex
	queue       []api.Event
	queuedBytes int
	dropEvents  uint64
	dropBytes   int64
	done        bool
}

// offer queues ev, or counts it as dropped when the queue is full (a
// chunk larger than the queue still goes to an empty one).
func (fl *RunFollower) offer(ev api.RunOutputEvent) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.queuedBytes > 0 && fl.queuedBytes+len(ev.Data) > followerQueueBytes {
		fl.dropEvents++
		fl.dropBytes += int64(len(ev.Data))
		return
	}
	fl.flushDropped(ev.RunID)
	fl.queue = append(fl.queue, ev)
	fl.queuedBytes += len(ev.Data)
	fl.wake()
}

func (fl *RunFollower) close(end *api.RunExitedEvent) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.flushDropped(end.RunID)
	fl.queue = append(fl.queue, *end)
	fl.done = true
	fl.wake()
}

// flushDropped queues the notice of what was dropped since the last
// queued chunk (fl.mu held).
func (fl *RunFollower) flushDropped(runID string) {
	if fl.dropEvents == 0 {
		return
	}
	fl.queue = append(fl.queue, api.RunOutputDroppedEvent{RunID: runID, Events: fl.dropEvents, Bytes: fl.dropBytes})
	fl.dropEvents, fl.dropBytes = 0, 0
}

func (fl *RunFollower) wake() {
	select {
	case fl.ready <- struct{}{}:
	default:
	}
}

// Next waits for events and returns those queued, in order; after the
// run.exited event it returns io.EOF. It returns ctx's error when ctx ends
// first.
func (fl *RunFollower) Next(ctx context.Context) ([]api.Event, error) {
	for {
		fl.mu.Lock()
		if len(fl.queue) > 0 {
			evs := fl.queue
			fl.queue, fl.queuedBytes = nil, 0
			fl.mu.Unlock()
			return evs, nil
		}
		done := fl.done
		fl.mu.Unlock()
		if done {
			return nil, io.EOF
		}
		select {
		case <-fl.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops following; the run goes on.
func (fl *RunFollower) Close() { fl.feed.unfollow(fl) }

// FollowRun follows the output of a run in progress in this daemon, for
// its owner and approvers (as LiveRuns lists it): the newest output so
// far, then each chunk as the run writes it, then run.exited. Another
// uid's run is "not there", as for CancelRun.
func (s *Service) FollowRun(_ context.Context, caller api.Peer, runID string) (*RunFollower, error) {
	if runID == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "run_id is required (the Live runs list names it)")
	}
	feed := s.runs.feed(runID, s.IsApprover(caller), caller.UID)
	if feed == nil {
		return nil, errkind.Errorf(errkind.NotFound, "run %q is not running: it has ended, or it is not yours", runID)
	}
	return feed.follow()
}
