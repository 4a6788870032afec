package service

// The files API keeps a session's workspace open between calls. A
// workspace.Workspace walks its tree once, when a quota is first checked,
// and keeps that count up to date with its own writes and deletions; an
// upload in pieces through a Workspace opened per call would walk the
// whole session workspace once per piece. The session workspace is the
// daemon's own directory (root's, 0700): besides the files API, only the
// runs of the session change it, so the open Workspace is dropped before
// and after each such run (and when the session goes), and the next call
// opens it again and walks anew.

import (
	"errors"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
)

const (
	// wsIdle is how long a session workspace stays open unused.
	wsIdle = time.Minute
	// wsMaxOpen bounds the session workspaces kept open; past it the
	// least recently used is closed.
	wsMaxOpen = 256
)

// sessionWorkspaces are the open workspaces of sessions, by session id.
// An entry dropped while calls still use it is closed by the last of them.
// The zero value is ready to use.
type sessionWorkspaces struct {
	mu      sync.Mutex
	open    map[string]*openWorkspace
	dropped uint64      // bumped by every drop: an open that overlapped one is not kept
	sweep   *time.Timer // closes idle entries; nil when none is open

	// idle and max are wsIdle and wsMaxOpen when 0 (tests lower them).
	idle time.Duration
	max  int
	// opened, when set (tests), is told of every Workspace opened.
	opened func(dir string)
}

// openWorkspace is one session's open workspace and the calls using it.
type openWorkspace struct {
	ws      *workspace.Workspace
	refs    int
	used    time.Time
	dropped bool // out of the map: closed once refs is 0
}

// acquire returns the session's open workspace, opening it with open when
// none is kept (nil, with a nil error, when open finds none); release it
// when done.
func (c *sessionWorkspaces) acquire(id string, open func() (*workspace.Workspace, error)) (*workspace.Workspace, func(), error) {
	c.mu.Lock()
	if e := c.open[id]; e != nil {
		e.refs++
		c.mu.Unlock()
		return e.ws, func() { c.release(e) }, nil
	}
	gen := c.dropped
	c.mu.Unlock()

	ws, err := open()
	if err != nil || ws == nil {
		return nil, func() {}, err
	}
	if c.opened != nil {
		c.opened(ws.Dir())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.open[id]; e != nil {
		// Another call opened it meanwhile (after any drop): use that one.
		ws.Close()
		e.refs++
		return e.ws, func() { c.release(e) }, nil
	}
	e := &openWorkspace{ws: ws, refs: 1}
	if c.dropped != gen {
		// Opened across a drop (a run may have been changing the tree):
		// used by this call only.
		e.dropped = true
		return ws, func() { c.release(e) }, nil
	}
	if c.open == nil {
		c.open = map[string]*openWorkspace{}
	}
	c.open[id] = e
	c.bound()
	c.schedule()
	return ws, func() { c.release(e) }, nil
}

// release ends a call's use of e.
func (c *sessionWorkspaces) release(e *openWorkspace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	e.used = time.Now()
	if e.dropped && e.refs == 0 {
		e.ws.Close()
	}
}

// drop forgets the session's open workspace (closed now, or by the last
// call still using it): the next call opens it again.
func (c *sessionWorkspaces) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropped++
	if e := c.open[id]; e != nil {
		c.remove(id, e)
	}
}

// remove takes e out of the map, closing it unless in use; c.mu held.
func (c *sessionWorkspaces) remove(id string, e *openWorkspace) {
	delete(c.open, id)
	e.dropped = true
	if e.refs == 0 {
		e.ws.Close()
	}
}

// bound closes the least recently used entries past the most kept; c.mu
// held.
func (c *sessionWorkspaces) bound() {
	max := c.max
	if max <= 0 {
		max = wsMaxOpen
	}
	for len(c.open) > max {
		var oldID string
		var old *openWorkspace
		for id, e := range c.open {
			if old == nil || lessUsed(e, old) {
				oldID, old = id, e
			}
		}
		c.remove(oldID, old)
	}
}

// lessUsed orders entries for bound: unused before in use, then by when
// last released.
func lessUsed(a, b *openWorkspace) bool {
	if (a.refs == 0) != (b.refs == 0) {
		return a.refs == 0
	}
	return a.used.Before(b.used)
}

// schedule sets the sweep of idle entries going, unless it is; c.mu held.
func (c *sessionWorkspaces) schedule() {
	if c.sweep == nil {
		c.sweep = time.AfterFunc(c.idleFor(), c.closeIdle)
	}
}

func (c *sessionWorkspaces) idleFor() time.Duration {
	if c.idle > 0 {
		return c.idle
	}
	return wsIdle
}

// closeIdle closes the entries unused for longer than the idle time, and
// comes back when the next may be.
func (c *sessionWorkspaces) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	idle, now := c.idleFor(), time.Now()
	next := idle
	for id, e := range c.open {
		if e.refs > 0 {
			continue
		}
		if left := idle - now.Sub(e.used); left > 0 {
			next = min(next, left)
			continue
		}
		c.remove(id, e)
	}
	if len(c.open) == 0 {
		c.sweep = nil
		return
	}
	c.sweep.Reset(next)
}

// unavailable says whether err may come of a workspace no longer usable
// (removed, closed), which is dropped rather than kept.
func unavailable(err error) bool {
	return errors.Is(err, errkind.Unavailable)
}
