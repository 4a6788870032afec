package service

import (
	"context"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// runSlots share the daemon's run slots fairly between uids: one uid holds
// at most perUID runs and queues at most queuePerUID more, and reserve
// slots are only ever given to approvers, so that however one uid floods
// the daemon, another still gets a slot and an approver always does (an
// approval must never wait behind the flood it is meant to stop).
type runSlots struct {
	mu          sync.Mutex
	total       int
	reserve     int
	perUID      int
	queuePerUID int
	running     int
	byUID       map[uint32]int
	queued      map[uint32]int
	wake        chan struct{} // closed and replaced whenever a slot frees
}

func newRunSlots(total, reserve, perUID, queuePerUID int) *runSlots {
	total = max(1, total)
	reserve = min(max(0, reserve), total-1)
	if perUID <= 0 {
		perUID = total
	}
	return &runSlots{total: total, reserve: reserve, perUID: perUID, queuePerUID: max(0, queuePerUID),
		byUID: map[uint32]int{}, queued: map[uint32]int{}, wake: make(chan struct{})}
}

// take reports whether uid may start a run now (and takes the slot).
func (r *runSlots) take(uid uint32, approver bool) bool {
	limit := r.total - r.reserve
	if approver {
		limit = r.total
	} else if r.byUID[uid] >= r.perUID {
		return false
	}
	if r.running >= limit {
		return false
	}
	r.running++
	r.byUID[uid]++
	return true
}

func (r *runSlots) release(uid uint32) {
	r.mu.Lock()
	r.running--
	if r.byUID[uid]--; r.byUID[uid] <= 0 {
		delete(r.byUID, uid)
	}
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// acquire waits up to wait for a slot for uid; a uid with too many runs
// waiting already is refused at once.
func (r *runSlots) acquire(ctx context.Context, uid uint32, approver bool, wait time.Duration) (func(), error) {
	done := func() { r.release(uid) }
	r.mu.Lock()
	if r.take(uid, approver) {
		r.mu.Unlock()
		return done, nil
	}
	if !approver && r.queued[uid] >= r.queuePerUID {
		n, q := r.byUID[uid], r.queued[uid]
		r.mu.Unlock()
		return nil, errkind.Errorf(errkind.LimitExceeded, "uid %d already has %d runs in progress and %d waiting (daemon.max_runs_per_uid, max_queued_runs_per_uid); wait for one to finish", uid, n, q)
	}
	r.queued[uid]++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.queued[uid]--; r.queued[uid] <= 0 {
			delete(r.queued, uid)
		}
		r.mu.Unlock()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		r.mu.Lock()
		if r.take(uid, approver) {
			r.mu.Unlock()
			return done, nil
		}
		wake := r.wake
		mine := r.byUID[uid]
		r.mu.Unlock()
		select {
		case <-wake:
		case <-t.C:
			if !approver && mine >= r.perUID {
				return nil, errkind.Errorf(errkind.LimitExceeded, "uid %d already has %d runs in progress (daemon.max_runs_per_uid); retry when one has finished", uid, mine)
			}
			return nil, errkind.Errorf(errkind.LimitExceeded, "%d runs are already in progress (max_concurrent_runs); retry shortly", r.total)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
