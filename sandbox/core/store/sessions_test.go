package store

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
)

// fakeClock is a settable clock for the stores.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openState(t *testing.T, dir string) *StateDB {
	t.Helper()
	st, err := OpenStateDB(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestSessionsPersistAcrossReopen(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		dir := t.TempDir()
		st := b.open(t, dir)
		ss := NewSessionStore(st, SessionOptions{})
		s, err := ss.Create(1000)
		if err != nil {
			t.Fatal(err)
		}
		if !ValidID(s.ID, "ses_") {
			t.Fatalf("session id %q", s.ID)
		}
		var seen *Session
		err = ss.Update(s.ID, 1000, func(x *Session) error {
			x.Active = append(x.Active,
				ActiveSkill{Name: "pdf", Digest: "sha256:aa", Dir: "/skills/pdf", LoadedAt: time.Now().UTC()},
				ActiveSkill{Name: "xlsx", Digest: "sha256:bb", Dir: "/skills/xlsx", LoadedAt: time.Now().UTC()})
			x.OwnerUID = 0 // ignored: the owner cannot change
			seen = x
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen.OwnerUID != 1000 || len(seen.Active) != 2 {
			t.Fatalf("session after Update: %+v", seen)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}

		st = b.open(t, dir)
		defer st.Close()
		ss = NewSessionStore(st, SessionOptions{})
		got, err := ss.Get(s.ID, 1000)
		if err != nil {
			t.Fatalf("session lost across reopen: %v", err)
		}
		if len(got.Active) != 2 || got.Active[0].Name != "pdf" || got.Active[1].Name != "xlsx" || got.Active[1].Dir != "/skills/xlsx" {
			t.Fatalf("active skills after reopen: %+v", got.Active)
		}
		list, err := ss.List(1000)
		if err != nil || len(list) != 1 || list[0].ID != s.ID {
			t.Fatalf("List = %v, %v", list, err)
		}
	})
}

func TestSessionsInvisibleToOtherUIDs(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		st := b.open(t, t.TempDir())
		defer st.Close()
		ss := NewSessionStore(st, SessionOptions{})
		a, _ := ss.Create(1000)

		_, errB := ss.Get(a.ID, 1001)
		_, errNone := ss.Get("ses_"+strings.Repeat("0", 32), 1001)
		if !errors.Is(errB, api.ErrNotFound) || !errors.Is(errNone, api.ErrNotFound) {
			t.Fatalf("Get by another uid: %v", errB)
		}
		// The answer does not reveal that the session exists.
		if strings.Replace(errB.Error(), a.ID, "X", 1) != strings.Replace(errNone.Error(), "ses_"+strings.Repeat("0", 32), "X", 1) {
			t.Fatalf("errors differ: %q vs %q", errB, errNone)
		}
		if err := ss.Update(a.ID, 1001, func(*Session) error { return nil }); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("Update by another uid: %v", err)
		}
		if err := ss.Close(a.ID, 1001); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("Close by another uid: %v", err)
		}
		if l, _ := ss.List(1001); len(l) != 0 {
			t.Fatalf("List by another uid: %v", l)
		}
		if _, err := ss.Get("../../etc", 1000); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("malformed id: %v", err)
		}
		// The owner still has it, and can close it once.
		if err := ss.Close(a.ID, 1000); err != nil {
			t.Fatal(err)
		}
		if err := ss.Close(a.ID, 1000); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("second Close: %v", err)
		}
	})
}

func TestSessionUpdateErrorRollsBack(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		st := b.open(t, t.TempDir())
		defer st.Close()
		ss := NewSessionStore(st, SessionOptions{})
		s, _ := ss.Create(1)
		boom := errors.New("too many skills")
		err := ss.Update(s.ID, 1, func(x *Session) error {
			x.Active = append(x.Active, ActiveSkill{Name: "a"})
			return boom
		})
		if err != boom {
			t.Fatalf("Update error %v, want fn's error as is", err)
		}
		got, _ := ss.Get(s.ID, 1)
		if len(got.Active) != 0 {
			t.Fatal("failed Update was written")
		}
	})
}

func TestSessionExpiry(t *testing.T) {
	forBackends(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		st := be.open(t, dir)
		clk := newClock()
		var expired, added []string
		ss := NewSessionStore(st, SessionOptions{TTL: time.Hour, Now: clk.Now, OnExpire: func(s Session) { expired = append(expired, s.ID) }})
		ss.AddExpireHook(func(s Session) { added = append(added, s.ID) })
		a, _ := ss.Create(7)
		b, _ := ss.Create(7)

		// a is used through Get (in memory only), b is not.
		clk.Advance(50 * time.Minute)
		if _, err := ss.Get(a.ID, 7); err != nil {
			t.Fatal(err)
		}
		clk.Advance(20 * time.Minute)
		if _, err := ss.Get(b.ID, 7); !errors.Is(err, api.ErrNotFound) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("idle session: %v", err)
		}
		n, err := ss.Sweep()
		if err != nil || n != 1 || len(expired) != 1 || expired[0] != b.ID || len(added) != 1 || added[0] != b.ID {
			t.Fatalf("Sweep = %d, %v; expired %v, added hook %v", n, err, expired, added)
		}
		// The sweep wrote a's use mark: a reopened store (no memory) keeps it.
		st.Close()
		st = be.open(t, dir)
		defer st.Close()
		ss = NewSessionStore(st, SessionOptions{TTL: time.Hour, Now: clk.Now})
		if _, err := ss.Get(a.ID, 7); err != nil {
			t.Fatalf("used session expired after reopen: %v", err)
		}
		clk.Advance(2 * time.Hour)
		if l, _ := ss.List(7); len(l) != 0 {
			t.Fatalf("List shows expired sessions: %v", l)
		}
	})
}

func TestSessionLimitPerOwner(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		st := b.open(t, t.TempDir())
		defer st.Close()
		ss := NewSessionStore(st, SessionOptions{MaxPerOwner: 2})
		ss.Create(5)
		ss.Create(5)
		if _, err := ss.Create(5); !errors.Is(err, api.ErrLimitExceeded) {
			t.Fatalf("third session: %v", err)
		}
		if _, err := ss.Create(6); err != nil {
			t.Fatalf("another uid is limited too: %v", err)
		}
	})
}

func TestStateDBSingleOpener(t *testing.T) {
	dir := t.TempDir()
	st := openState(t, dir)
	defer st.Close()
	if _, err := OpenStateDB(dir); err == nil || !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("second open: %v", err)
	}
}

// TestSessionCount: Count is every uid's open sessions, without the
// closed and the expired ones.
func TestSessionCount(t *testing.T) {
	forBackends(t, func(t *testing.T, be backend) {
		st := be.open(t, t.TempDir())
		defer st.Close()
		clk := newClock()
		ss := NewSessionStore(st, SessionOptions{TTL: time.Hour, Now: clk.Now})
		count := func(want int) {
			t.Helper()
			if n, err := ss.Count(); err != nil || n != want {
				t.Fatalf("Count = %d, %v; want %d", n, err, want)
			}
		}
		count(0)
		a, _ := ss.Create(7)
		ss.Create(8)
		clk.Advance(50 * time.Minute)
		c, _ := ss.Create(9)
		count(3)
		if err := ss.Close(c.ID, 9); err != nil {
			t.Fatal(err)
		}
		count(2)
		if _, err := ss.Get(a.ID, 7); err != nil {
			t.Fatal(err)
		}
		clk.Advance(20 * time.Minute) // uid 8's session has expired; a was used
		count(1)
	})
}
