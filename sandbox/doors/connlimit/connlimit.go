// Package connlimit is the bound on the connections a listener holds: per
// uid, in total, and with a reserve that only privileged peers (the daemon's
// approvers) may take, so that one local user holding idle connections can
// neither exhaust the daemon's descriptors nor lock anyone else out.
//
// Every listener of the daemon counts through a Limiter: the JSON-RPC server
// asks it directly (it answers a refusal with a JSON-RPC error), and the
// HTTP listeners (the console socket and its loopback bridge, the metrics
// endpoint) wrap their net.Listener in a Listener, which refuses at Accept
// without ever blocking or queueing.
//
// It imports nothing of skillbox: a peer is a uid and whether the kernel
// reported one.
package connlimit

import (
	"errors"
	"fmt"
	"sync"
)

// Limits are the caps of one Limiter. A zero or negative field is no cap.
type Limits struct {
	// Total bounds the open connections of every peer together.
	Total int
	// PerUID bounds the open connections of one uid. Privileged peers are
	// not bound by it. Connections without credentials (loopback TCP)
	// share one count, as if they were one uid.
	PerUID int
	// Reserved of Total are kept for privileged peers: the others get
	// at most Total-Reserved (and at least one).
	Reserved int
}

// ErrRefused is the kind of every refusal (errors.Is).
var ErrRefused = errors.New("connection refused")

// Scope says which cap refused a connection.
type Scope string

// The caps a refusal can name.
const (
	ScopeTotal  Scope = "total"
	ScopePerUID Scope = "per_uid"
)

// RefusedError is a refused connection: which cap, whose, how many are open
// and the cap.
type RefusedError struct {
	Scope Scope
	// UID is the peer's, when it had credentials (Known).
	UID   uint32
	Known bool
	// Open is what was open for the scope when it was refused; Limit its
	// cap.
	Open, Limit int
}

func (e *RefusedError) Error() string {
	if e.Scope == ScopePerUID {
		who := "peers without credentials"
		if e.Known {
			who = fmt.Sprintf("uid %d", e.UID)
		}
		return fmt.Sprintf("%s already has %d connections open (at most %d); close idle ones or reuse one", who, e.Open, e.Limit)
	}
	return fmt.Sprintf("%d connections are open (at most %d); close idle ones or retry later", e.Open, e.Limit)
}

// Unwrap makes the error of kind ErrRefused.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Limiter counts open connections against its Limits. It is safe for
// concurrent use.
type Limiter struct {
	limits Limits
	mu     sync.Mutex
	open   int
	perUID map[uidKey]int
}

// uidKey is a uid, or the one count of peers without credentials.
type uidKey struct {
	uid   uint32
	known bool
}

// New returns a Limiter with limits.
func New(limits Limits) *Limiter {
	return &Limiter{limits: limits, perUID: map[uidKey]int{}}
}

// Limits returns the limiter's caps.
func (l *Limiter) Limits() Limits { return l.limits }

// Acquire takes one connection for the peer: uid, when known says the
// kernel reported one. privileged (nil: never) says whether the peer may
// use the reserve and is exempt from PerUID; it is asked only when a cap
// would refuse the peer otherwise, so a lookup it does is not paid on
// every connection. Acquire returns the release to call when the
// connection closes (once; later calls do nothing), or a *RefusedError.
func (l *Limiter) Acquire(uid uint32, known bool, privileged func() bool) (release func(), err error) {
	k := uidKey{uid: uid, known: known}
	if !known {
		k.uid = 0
	}
	l.mu.Lock()
	err = l.refusal(k, false)
	if err != nil && privileged != nil {
		l.mu.Unlock() // the lookup may be slow: never under the lock
		if !privileged() {
			return nil, err
		}
		l.mu.Lock()
		err = l.refusal(k, true)
	}
	defer l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	l.open++
	l.perUID[k]++
	var once sync.Once
	return func() { once.Do(func() { l.release(k) }) }, nil
}

// refusal says which cap refuses one more connection of k, if any.
func (l *Limiter) refusal(k uidKey, privileged bool) error {
	if total := l.limits.Total; total > 0 {
		limit := total
		if !privileged {
			limit -= min(max(0, l.limits.Reserved), total-1)
		}
		if l.open >= limit {
			return &RefusedError{Scope: ScopeTotal, UID: k.uid, Known: k.known, Open: l.open, Limit: total}
		}
	}
	if per := l.limits.PerUID; per > 0 && !privileged && l.perUID[k] >= per {
		return &RefusedError{Scope: ScopePerUID, UID: k.uid, Known: k.known, Open: l.perUID[k], Limit: per}
	}
	return nil
}

func (l *Limiter) release(k uidKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.perUID[k]--; l.perUID[k] <= 0 {
		delete(l.perUID, k)
	}
}

// Open returns the connections open in all, and of uid (known as in
// Acquire).
func (l *Limiter) Open(uid uint32, known bool) (total, ofUID int) {
	k := uidKey{uid: uid, known: known}
	if !known {
		k.uid = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.perUID[k]
}
