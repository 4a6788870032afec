package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

func account(t *testing.T, b *Budget, session string, uid uint32) *Account {
	t.Helper()
	a, err := b.Account(session, uid)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func budgetUsage(t *testing.T, b *Budget, uid uint32, wantUID, wantTotal int64, what string) {
	t.Helper()
	if u, tot := b.Usage(uid); u != wantUID || tot != wantTotal {
		t.Fatalf("%s: uid %d holds %d, all %d; want %d, %d", what, uid, u, tot, wantUID, wantTotal)
	}
}

// The ledger per uid and in total: reservations count at once, a refusal
// names usage, limit and sessions, a failed write gives back, deletions
// and closed sessions release, and a walk's count replaces the ledger's
// only when nothing changed meanwhile.
func TestBudgetLedger(t *testing.T) {
	b := NewBudget(100, 150)
	a1, a2 := account(t, b, "ses_a1", 1000), account(t, b, "ses_a2", 1000)
	c := account(t, b, "ses_c", 2000)

	r, err := a1.Reserve(60)
	if err != nil {
		t.Fatal(err)
	}
	budgetUsage(t, b, 1000, 60, 60, "reserved")
	// The reservation counts before the write is done: a second session of
	// the same uid cannot take the same bytes.
	if _, err := a2.Reserve(41); !errors.Is(err, api.ErrLimitExceeded) {
		t.Fatalf("a second session past the uid's budget: %v", err)
	} else {
		for _, want := range []string{"uid 1000", "101 bytes", "budget of 100 bytes", "daemon.workspace_quota_per_uid", "hold 60 bytes", "session ses_a1 60 bytes", "workspace.delete", "sessions.close"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q does not say %q", err, want)
			}
		}
	}
	r.Done(50) // wrote less than it reserved
	budgetUsage(t, b, 1000, 50, 50, "done")
	r.Done(999) // twice: nothing
	budgetUsage(t, b, 1000, 50, 50, "done twice")

	r2 := mustReserve(t, a2, 50)
	r2.Done(0) // failed before it wrote
	budgetUsage(t, b, 1000, 50, 50, "failed write")
	mustReserve(t, a2, 50).Done(50)
	budgetUsage(t, b, 1000, 100, 100, "at the budget")
	if _, err := a2.Reserve(1); !errors.Is(err, api.ErrLimitExceeded) {
		t.Fatalf("one byte past the budget: %v", err)
	}

	// Another uid is not bound by uid 1000's budget, only by the total.
	mustReserve(t, c, 50).Done(50)
	budgetUsage(t, b, 2000, 50, 150, "another uid")
	_, err = c.Reserve(1)
	if !errors.Is(err, api.ErrLimitExceeded) || !strings.Contains(err.Error(), "daemon.workspace_quota_total") || !strings.Contains(err.Error(), "total budget of 150 bytes") || !strings.Contains(err.Error(), "session ses_c 50 bytes") {
		t.Fatalf("past the total: %v", err)
	}

	// Deletions give back, never below zero; a closed session all it held.
	a1.Add(-20)
	budgetUsage(t, b, 1000, 80, 130, "deleted")
	a1.Add(-1000)
	budgetUsage(t, b, 1000, 50, 100, "deleted more than counted")
	b.Remove("ses_a2")
	budgetUsage(t, b, 1000, 0, 50, "closed")
	mustReserve(t, c, 50).Done(50)

	// A reservation under way when its session closes changes nothing.
	a3 := account(t, b, "ses_a3", 1000)
	r3 := mustReserve(t, a3, 0)
	b.Remove("ses_c")
	b.Remove("ses_a3")
	r3.Done(10)
	budgetUsage(t, b, 1000, 0, 0, "closed under a write")
	if _, err := a3.Reserve(1); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("reserve on a closed session: %v", err)
	}

	// One session, one owner.
	if _, err := b.Account("ses_a1", 2000); !errors.Is(err, api.ErrInternal) {
		t.Fatalf("a session's account under another uid: %v", err)
	}

	// Sync: a walk's count, unless a change overlapped it.
	g := a1.Gen()
	if !a1.Sync(g, 70) {
		t.Fatal("a quiet sync was not kept")
	}
	budgetUsage(t, b, 1000, 70, 70, "synced")
	g = a1.Gen()
	a1.Add(5)
	if a1.Sync(g, 10) {
		t.Fatal("a sync across a change was kept")
	}
	g = a1.Gen()
	r4 := mustReserve(t, a1, 5)
	if a1.Sync(g, 10) || a1.Sync(a1.Gen(), 10) {
		t.Fatal("a sync with a write under way was kept")
	}
	r4.Done(5)
	budgetUsage(t, b, 1000, 80, 80, "after the refused syncs")
}

func mustReserve(t *testing.T, a *Account, n int64) *Reservation {
	t.Helper()
	r, err := a.Reserve(n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A refusal names the largest sessions, and counts the rest.
func TestBudgetRefusalNamesSessions(t *testing.T) {
	b := NewBudget(1000, 0)
	for i := range 8 {
		mustReserve(t, account(t, b, fmt.Sprintf("ses_%d", i), 7), int64(100+i)).Done(int64(100 + i))
	}
	_, err := account(t, b, "ses_new", 7).Reserve(1 << 20)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{"session ses_7 107 bytes, session ses_6 106 bytes", "3 more sessions 303 bytes", "(1.0 MiB)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
}

// Writers of one uid in several sessions at once, through the files API
// of each session's own workspace: together they stop at the uid's
// budget to the byte, what is on disk is what the ledger counts, and
// another uid still writes.
func TestBudgetConcurrentWritersAcrossSessions(t *testing.T) {
	const (
		sessions = 6
		writers  = 4 // per session
		piece    = 1000
		perUID   = 17 * piece
	)
	b := NewBudget(perUID, 0)
	base := t.TempDir()
	var wss []*Workspace
	for i := range sessions {
		dir := filepath.Join(base, fmt.Sprint(i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		w, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		wss = append(wss, w)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	written, refused := 0, 0
	for i, w := range wss {
		acct := account(t, b, fmt.Sprintf("ses_%d", i), 1000)
		for j := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					_, err := w.WriteAt(fmt.Sprintf("w%d-%d", j, k), 0, bytes.Repeat([]byte("x"), piece), true, 0, Options{Account: acct})
					mu.Lock()
					if err != nil {
						if !errors.Is(err, api.ErrLimitExceeded) || !strings.Contains(err.Error(), "uid 1000") {
							t.Errorf("write: %v", err)
						}
						refused++
						mu.Unlock()
						return
					}
					written++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	var onDisk int64
	for _, w := range wss {
		n, _, err := w.Usage()
		if err != nil {
			t.Fatal(err)
		}
		onDisk += n
	}
	if written != perUID/piece || onDisk != perUID || refused != sessions*writers {
		t.Fatalf("%d writes of %d bytes went through (%d bytes on disk), %d refused; want %d, %d bytes, %d", written, piece, onDisk, refused, perUID/piece, perUID, sessions*writers)
	}
	budgetUsage(t, b, 1000, perUID, perUID, "after the writers")

	// Another uid is unaffected.
	other := account(t, b, "ses_other", 2000)
	if _, err := wss[0].WriteAt("other", 0, []byte("mine"), true, 0, Options{Account: other}); err != nil {
		t.Fatalf("another uid's write: %v", err)
	}
	// Deleting gives back: a file, then a directory of files.
	wss[0].Delete("other", false)
	other.Add(-4)
	// Which sessions' writers got through is the scheduler's choice: take
	// one that holds a piece.
	k := -1
	var ents []api.WorkspaceEntry
	for i, w := range wss {
		list, _, err := w.List(".", false, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 {
			k, ents = i, list
			break
		}
	}
	if k < 0 {
		t.Fatal("no session holds a file after the writers")
	}
	acct0 := account(t, b, fmt.Sprintf("ses_%d", k), 1000)
	held := acct0.Held()
	if _, err := wss[k].DeleteAccounted(ents[0].Path, false, acct0); err != nil {
		t.Fatal(err)
	}
	if got := acct0.Held(); got != held-piece {
		t.Fatalf("a deleted file gave back %d bytes, want %d", held-got, piece)
	}
	// The freed piece is the uid's again, in any of its sessions.
	acct1 := account(t, b, "ses_1", 1000)
	for _, p := range []struct{ rel, data string }{{"d/e/f", "abc"}, {"d/g", "defg"}} {
		if _, err := wss[1].WriteAt(p.rel, 0, []byte(p.data), true, 0, Options{Account: acct1}); err != nil {
			t.Fatalf("a write into the freed bytes: %v", err)
		}
	}
	before := acct1.Held()
	if _, err := wss[1].DeleteAccounted("d", true, acct1); err != nil {
		t.Fatal(err)
	}
	if got := before - acct1.Held(); got != 7 {
		t.Fatalf("a recursive delete gave back %d bytes, want 7 (the files under it)", got)
	}
}

// A run's write-back takes its growth from the account: a file past the
// uid's budget is refused by name, naming the budget, and the rest is
// written; the walk at its start sets the ledger to what is there.
func TestBudgetApply(t *testing.T) {
	f := newFixture(t)
	f.file("old.txt", "0123456789") // 10 bytes the ledger does not know yet
	w := f.open()
	b := NewBudget(30, 0)
	other := account(t, b, "ses_other", 1000)
	mustReserve(t, other, 20).Done(20)
	acct := account(t, b, "ses_ws", 1000)
	snap, err := w.Snapshot(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := w.Apply(snap, Changes{Written: []runtime.OutputFile{
		{Path: "a.txt", Data: []byte("12345")},
		{Path: "big.bin", Data: bytes.Repeat([]byte("b"), 6)},
		{Path: "c.txt", Data: []byte("c")},
	}, Deleted: []string{"old.txt"}}, true, Options{Account: acct})
	if err != nil {
		t.Fatal(err)
	}
	// 20 of the other session, 10 walked, less 10 deleted, 5 + 1 written:
	// big.bin's 6 would make 31 of 30.
	if len(rep.Refused) != 1 || rep.Refused[0].Path != "big.bin" || !strings.Contains(rep.Refused[0].Why, "daemon.workspace_quota_per_uid") {
		t.Fatalf("refused %+v", rep.Refused)
	}
	if len(rep.Written) != 2 || len(rep.Deleted) != 1 {
		t.Fatalf("written %+v, deleted %+v", rep.Written, rep.Deleted)
	}
	if got := acct.Held(); got != 6 {
		t.Fatalf("the session holds %d bytes as counted, want 6", got)
	}
	budgetUsage(t, b, 1000, 26, 26, "after the write-back")
}
