package mcp

import (
	"context"
	"net/url"
	"path/filepath"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A connection's runs work on a workspace (see package workspace): the
// first file:// root the client lists (the roots capability; hosts list
// the project they run in), else Options.Workspace (skillbox mcp's
// --workspace, the directory it was started in). The client may change
// its roots at any time (notifications/roots/list_changed); the next run
// uses the new list.

// workspaceDir is the directory a run works on ("": none). Roots are asked
// for when the connection starts; a run that comes before the answer asks
// itself.
func (c *Conn) workspaceDir(ctx context.Context, ss *sdk.ServerSession) string {
	c.mu.Lock()
	known := c.rootsKnown
	c.mu.Unlock()
	if !known && ss != nil {
		c.refreshRoots(ctx, ss)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rootDir != "" {
		return c.rootDir
	}
	return c.s.opts.Workspace
}

// refreshRoots asks a client that has roots for them and keeps the first
// file:// one.
func (c *Conn) refreshRoots(ctx context.Context, ss *sdk.ServerSession) {
	if p := ss.InitializeParams(); p == nil || p.Capabilities == nil || p.Capabilities.RootsV2 == nil {
		c.mu.Lock()
		c.rootsKnown = true
		c.mu.Unlock()
		return
	}
	res, err := ss.ListRoots(ctx, &sdk.ListRootsParams{})
	if err != nil {
		c.s.log.Warn("listing the client's roots failed; runs keep the workspace they had", "error", err)
		return
	}
	dir := ""
	for _, r := range res.Roots {
		if d, ok := rootDir(r.URI); ok {
			dir = d
			break
		}
	}
	c.mu.Lock()
	changed := c.rootDir != dir
	c.rootDir, c.rootsKnown = dir, true
	c.mu.Unlock()
	if changed {
		c.s.log.Info("workspace from the client's roots", "dir", dir, "session", c.session)
	}
}

// rootDir is the local directory of a file:// root URI.
func rootDir(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || u.Path == "" {
		return "", false
	}
	return filepath.Clean(u.Path), filepath.IsAbs(u.Path)
}
