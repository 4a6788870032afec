package api

// The files API: a session's own workspace (WorkspaceSession), the
// directory the daemon keeps for it, read and written by the host in
// pieces, so that a file of any size never sits in one message. Every
// path is relative to the workspace and confined to it; every write and
// delete is audited; writes count against the workspace's quota.

// Methods of the files API.
const (
	MethodWorkspaceList   = "workspace.list"
	MethodWorkspaceStat   = "workspace.stat"
	MethodWorkspaceRead   = "workspace.read"
	MethodWorkspaceWrite  = "workspace.write"
	MethodWorkspaceDelete = "workspace.delete"
)

// MaxWorkspaceChunk is the most one workspace.read returns and one
// workspace.write takes, in bytes of file data: in base64 with its
// envelope it stays well under the daemon's default request line limit
// (daemon.max_line_bytes, 4 MiB).
const MaxWorkspaceChunk = 1 << 20

// Kinds of WorkspaceEntry.Type.
const (
	WorkspaceEntryFile    = "file"
	WorkspaceEntryDir     = "dir"
	WorkspaceEntrySymlink = "symlink"
	WorkspaceEntryOther   = "other" // a FIFO, socket or device: never read
)

// WorkspaceEntry is one path of a workspace.
type WorkspaceEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode"`
	MTime  string `json:"mtime"`            // RFC 3339
	SHA256 string `json:"sha256,omitempty"` // workspace.stat of a file
	Target string `json:"target,omitempty"` // a symlink's
}

// WorkspacePathParams name a path of a session's workspace ("" or "." is
// the workspace itself).
type WorkspacePathParams struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path,omitempty"`
}

// WorkspaceListParams list a directory of the workspace; Recursive goes
// down the whole tree (at most Limit entries, default and cap
// MaxWorkspaceList).
type WorkspaceListParams struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

// MaxWorkspaceList bounds one workspace.list.
const MaxWorkspaceList = 10000

// WorkspaceListResult are the entries in path order; Truncated says the
// limit left some out (list a subdirectory, or raise limit).
type WorkspaceListResult struct {
	Entries   []WorkspaceEntry `json:"entries"`
	Truncated bool             `json:"truncated"`
	// Bytes and Quota are what the workspace holds and may hold.
	Bytes int64 `json:"bytes"`
	Quota int64 `json:"quota"`
}

// WorkspaceReadParams read Length bytes (at most MaxWorkspaceChunk; 0:
// that much) of a file from Offset.
type WorkspaceReadParams struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
}

// WorkspaceReadResult is one piece of a file: Data (base64 on the wire)
// from Offset, the file's Size, and EOF when the piece reaches its end.
type WorkspaceReadResult struct {
	Data   []byte `json:"data"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
	EOF    bool   `json:"eof"`
}

// WorkspaceWriteParams write Data (base64 on the wire; at most
// MaxWorkspaceChunk bytes) into a file at Offset, which may not lie past
// the file's end. Offset 0 with Truncate starts the file over (creating
// it and its directories when missing); a file is uploaded in pieces by
// writing each at the end of the last.
type WorkspaceWriteParams struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	Offset    int64  `json:"offset,omitempty"`
	Data      []byte `json:"data"`
	Truncate  bool   `json:"truncate,omitempty"`
	Mode      uint32 `json:"mode,omitempty"` // permission bits of a new file (0: 0644)
}

// WorkspaceWriteResult is the file's size after the write.
type WorkspaceWriteResult struct {
	Size int64 `json:"size"`
}

// WorkspaceDeleteParams remove a file, a symlink, or (Recursive) a
// directory with everything under it.
type WorkspaceDeleteParams struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// WorkspaceDeleteResult counts what was removed.
type WorkspaceDeleteResult struct {
	Removed int `json:"removed"`
}
