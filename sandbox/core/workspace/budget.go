package workspace

// A Budget bounds what the session workspaces a daemon keeps hold
// together: per uid (all of one uid's sessions) and in total (every
// session of every uid). A per-session quota alone lets one uid hold as
// many quotas as it may hold sessions.
//
// The Budget is a ledger, not a walk: each session's workspace has an
// Account with what it holds as last counted, and every write that makes
// a workspace grow takes its growth from the Account first (Reserve), in
// one step with the check of the uid's and the daemon's budget, under the
// Budget's one lock. Two writers, in one session or in two sessions of
// one uid, so never both take the last bytes of a budget: the second is
// refused before it writes. The reservation becomes what the write really
// changed when it is done (Done); a deletion gives its bytes back (Add);
// a closed session gives back all it held (Remove). What a walk finds
// replaces the count (Sync, at daemon start and when a write-back walks
// the workspace anyway), unless a change overlapped the walk.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// budgetNamed bounds how many of a uid's sessions a refusal names.
const budgetNamed = 5

// Budget is the ledger of what session workspaces hold, per uid and in
// total. A Budget is safe for concurrent use; the zero value is not: use
// NewBudget.
type Budget struct {
	perUID, total int64 // 0: no bound

	mu       sync.Mutex
	accounts map[string]*Account // by session id
	byUID    map[uint32]int64    // held and reserved, per uid
	sum      int64               // held and reserved, in all
}

// NewBudget is a ledger bounding what one uid's session workspaces hold
// together to perUID bytes and what all of them hold to total bytes (0:
// no bound).
func NewBudget(perUID, total int64) *Budget {
	return &Budget{perUID: perUID, total: total, accounts: map[string]*Account{}, byUID: map[uint32]int64{}}
}

// Limits are the budget's bounds (0: none).
func (b *Budget) Limits() (perUID, total int64) { return b.perUID, b.total }

// Account is session's account, owned by uid, made empty when the ledger
// has none. A session has one owner: an account kept under another uid
// is an error of kind errkind.Internal.
func (b *Budget) Account(session string, uid uint32) (*Account, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.accounts[session]
	if a == nil {
		a = &Account{b: b, session: session, uid: uid}
		b.accounts[session] = a
	}
	if a.uid != uid {
		return nil, errkind.Errorf(errkind.Internal, "the workspace budget keeps session %s under uid %d, not uid %d", session, a.uid, uid)
	}
	return a, nil
}

// Remove drops session's account and gives back all it held (the session
// closed and its workspace is gone). Reservations still under way on it
// change nothing when done.
func (b *Budget) Remove(session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.accounts[session]
	if a == nil {
		return
	}
	b.move(a, -a.held())
	a.bytes, a.reserved, a.removed = 0, 0, true
	delete(b.accounts, session)
}

// Usage is what uid's session workspaces hold (reservations of writes
// under way included), and what all of them hold.
func (b *Budget) Usage(uid uint32) (uidBytes, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byUID[uid], b.sum
}

// move adds n to a's uid's and the total's count; b.mu held.
func (b *Budget) move(a *Account, n int64) {
	if n == 0 {
		return
	}
	b.byUID[a.uid] += n
	if b.byUID[a.uid] == 0 {
		delete(b.byUID, a.uid)
	}
	b.sum += n
}

// Account is one session workspace's part of a Budget.
type Account struct {
	b       *Budget
	session string
	uid     uint32

	// Under b.mu:
	bytes    int64  // what the workspace holds, as last counted
	reserved int64  // taken by writes under way
	gen      uint64 // bumped by every change
	removed  bool   // out of the ledger (Remove)
}

// Session and UID say whose account it is.
func (a *Account) Session() string { return a.session }
func (a *Account) UID() uint32     { return a.uid }

func (a *Account) held() int64 { return a.bytes + a.reserved }

// Held is what the account holds, reservations under way included.
func (a *Account) Held() int64 {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	return a.held()
}

// Reservation is growth taken from an Account for a write under way.
type Reservation struct {
	a    *Account
	n    int64
	done bool
}

// Reserve takes n bytes (> 0) from the account for a write that grows
// the workspace by that much, or refuses it (errkind.LimitExceeded) where
// it would take the uid's session workspaces over the per-uid budget or
// all of them over the total, saying what they hold, the limit, and which
// sessions hold how much. The check and the taking are one step. Call
// Done on the reservation when the write is over, whatever its outcome.
func (a *Account) Reserve(n int64) (*Reservation, error) {
	b := a.b
	if n <= 0 {
		return &Reservation{a: a}, nil // nothing taken; Done adds the change
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.removed {
		return nil, errkind.Errorf(errkind.NotFound, "session %s was closed: its workspace is gone", a.session)
	}
	if used := b.byUID[a.uid]; b.perUID > 0 && used+n > b.perUID {
		return nil, errkind.Errorf(errkind.LimitExceeded, "would take the session workspaces of uid %d to %s, over its budget of %s (daemon.workspace_quota_per_uid); they hold %s: %s. Delete files it no longer needs (workspace.delete) or close sessions it is done with (sessions.close: the workspace goes with the session)",
			a.uid, sizeText(used+n), sizeText(b.perUID), sizeText(used), b.named(a.uid))
	}
	if b.total > 0 && b.sum+n > b.total {
		return nil, errkind.Errorf(errkind.LimitExceeded, "would take the session workspaces of this daemon, all uids together, to %s, over their total budget of %s (daemon.workspace_quota_total); they hold %s, of which uid %d's %s: %s. Delete files or close sessions no longer needed, or ask an administrator to raise workspace_quota_total",
			sizeText(b.sum+n), sizeText(b.total), sizeText(b.sum), a.uid, sizeText(b.byUID[a.uid]), b.named(a.uid))
	}
	a.reserved += n
	a.gen++
	b.move(a, n)
	return &Reservation{a: a, n: n}, nil
}

// Done ends the write the reservation was taken for: delta is what it
// changed the workspace's bytes by (0 for a write that failed before it
// changed anything; it may differ from what was reserved, and be
// negative). A second call does nothing.
func (r *Reservation) Done(delta int64) {
	if r == nil {
		return
	}
	a := r.a
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	if a.removed {
		return
	}
	a.reserved -= r.n
	b.move(a, -r.n)
	a.addLocked(delta)
	a.gen++
}

// Add adds delta (a deletion's negative bytes, or a change that took no
// reservation) to what the account holds; it never goes below zero.
func (a *Account) Add(delta int64) {
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.removed || delta == 0 {
		return
	}
	a.addLocked(delta)
	a.gen++
}

func (a *Account) addLocked(delta int64) {
	if a.bytes+delta < 0 {
		delta = -a.bytes
	}
	a.bytes += delta
	a.b.move(a, delta)
}

// Gen is the account's change count, taken before a walk whose result is
// given to Sync.
func (a *Account) Gen() uint64 {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	return a.gen
}

// Sync sets what the account holds to bytes, what a walk that began at
// gen (Gen) found, unless the account changed since or a write is under
// way (then the walk may have seen part of it): it reports whether it
// did.
func (a *Account) Sync(gen uint64, bytes int64) bool {
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.removed || a.gen != gen || a.reserved != 0 || bytes < 0 {
		return false
	}
	b.move(a, bytes-a.bytes)
	a.bytes = bytes
	a.gen++
	return true
}

// named says how much uid's largest sessions hold, for a refusal; b.mu
// held.
func (b *Budget) named(uid uint32) string {
	var mine []*Account
	for _, a := range b.accounts {
		if a.uid == uid && a.held() > 0 {
			mine = append(mine, a)
		}
	}
	if len(mine) == 0 {
		return "no session of uid " + fmt.Sprint(uid) + " holds anything"
	}
	slices.SortFunc(mine, func(x, y *Account) int {
		if c := cmp.Compare(y.held(), x.held()); c != 0 {
			return c
		}
		return strings.Compare(x.session, y.session)
	})
	parts := make([]string, 0, budgetNamed+1)
	for i, a := range mine {
		if i == budgetNamed {
			var rest int64
			for _, r := range mine[i:] {
				rest += r.held()
			}
			parts = append(parts, fmt.Sprintf("%d more sessions %s", len(mine)-i, sizeText(rest)))
			break
		}
		parts = append(parts, fmt.Sprintf("session %s %s", a.session, sizeText(a.held())))
	}
	return strings.Join(parts, ", ")
}

// sizeText is n in bytes, with a binary unit beside it past 1 KiB.
func sizeText(n int64) string {
	units := []struct {
		name string
		v    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	for _, u := range units {
		if n >= u.v {
			return fmt.Sprintf("%d bytes (%.1f %s)", n, float64(n)/float64(u.v), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
