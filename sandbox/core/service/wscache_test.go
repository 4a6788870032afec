package service

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
)

// opener opens a fresh temp directory as a workspace.
func opener(t *testing.T) func() (*workspace.Workspace, error) {
	return func() (*workspace.Workspace, error) { return workspace.Open(t.TempDir()) }
}

// isClosed says whether ws was closed (its calls fail as unavailable).
func isClosed(t *testing.T, ws *workspace.Workspace) bool {
	t.Helper()
	_, _, err := ws.Usage()
	if err != nil && !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("usage: %v", err)
	}
	return err != nil
}

func TestSessionWorkspacesReuse(t *testing.T) {
	var c sessionWorkspaces
	opens := 0
	open := func() (*workspace.Workspace, error) { opens++; return opener(t)() }
	ws1, rel1, err := c.acquire("s1", open)
	if err != nil {
		t.Fatal(err)
	}
	ws2, rel2, err := c.acquire("s1", open)
	if err != nil {
		t.Fatal(err)
	}
	rel1()
	rel2()
	if ws1 != ws2 || opens != 1 {
		t.Fatalf("two calls got %p and %p, %d opens: want one workspace, opened once", ws1, ws2, opens)
	}
	if isClosed(t, ws1) {
		t.Fatal("kept workspace closed after its calls")
	}
	c.drop("s1")
	if !isClosed(t, ws1) {
		t.Fatal("dropped workspace left open")
	}
	ws3, rel3, _ := c.acquire("s1", open)
	defer rel3()
	if ws3 == ws1 || opens != 2 {
		t.Fatalf("after a drop: same workspace %v, %d opens; want a new one", ws3 == ws1, opens)
	}
}

// A drop never closes a workspace a call is using; the last call closes it.
func TestSessionWorkspacesDropInUse(t *testing.T) {
	var c sessionWorkspaces
	ws, release, err := c.acquire("s1", opener(t))
	if err != nil {
		t.Fatal(err)
	}
	c.drop("s1")
	if isClosed(t, ws) {
		t.Fatal("dropped while in use: closed under the call")
	}
	if len(c.open) != 0 {
		t.Fatalf("dropped entry still kept: %v", c.open)
	}
	release()
	if !isClosed(t, ws) {
		t.Fatal("the last call did not close the dropped workspace")
	}
}

// A workspace opened while a drop happened (a run may have been changing
// the tree) serves its call but is not kept.
func TestSessionWorkspacesOpenAcrossDrop(t *testing.T) {
	var c sessionWorkspaces
	ws, release, err := c.acquire("s1", func() (*workspace.Workspace, error) {
		c.drop("s1")
		return opener(t)()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.open) != 0 {
		t.Fatal("a workspace opened across a drop was kept")
	}
	release()
	if !isClosed(t, ws) {
		t.Fatal("the unkept workspace was left open")
	}
}

func TestSessionWorkspacesNone(t *testing.T) {
	var c sessionWorkspaces
	ws, release, err := c.acquire("s1", func() (*workspace.Workspace, error) { return nil, nil })
	release()
	if ws != nil || err != nil || len(c.open) != 0 {
		t.Fatalf("got %v, %v, %d kept; want nothing", ws, err, len(c.open))
	}
}

// Past the most kept, the least recently used is closed.
func TestSessionWorkspacesBound(t *testing.T) {
	c := sessionWorkspaces{max: 2}
	var wss []*workspace.Workspace
	for _, id := range []string{"a", "b", "c"} {
		ws, release, err := c.acquire(id, opener(t))
		if err != nil {
			t.Fatal(err)
		}
		release()
		wss = append(wss, ws)
		time.Sleep(time.Millisecond) // each its own last use
	}
	if len(c.open) != 2 || c.open["a"] != nil {
		t.Fatalf("kept %v, want b and c", c.open)
	}
	if !isClosed(t, wss[0]) || isClosed(t, wss[1]) || isClosed(t, wss[2]) {
		t.Fatal("want the least recently used closed, the others open")
	}
}

// Entries unused for the idle time are closed; one in use stays.
func TestSessionWorkspacesIdle(t *testing.T) {
	c := sessionWorkspaces{idle: 20 * time.Millisecond}
	idle, release, err := c.acquire("idle", opener(t))
	if err != nil {
		t.Fatal(err)
	}
	release()
	busy, done, err := c.acquire("busy", opener(t))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	waitfor.NoError(t, "the idle entry to be closed", 5*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if n := len(c.open); n != 1 {
			return fmt.Errorf("%d kept", n)
		}
		return nil
	})
	if !isClosed(t, idle) || isClosed(t, busy) {
		t.Fatal("want the idle workspace closed and the busy one open")
	}
}
