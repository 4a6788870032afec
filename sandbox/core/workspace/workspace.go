// Package workspace is a run's workspace, a directory of the user's: the
// files the run names are copied into the run's /work before the run, and
// what the run created, changed or deleted there is applied back after it.
// The sandbox never sees the host directory itself, so nothing it does
// (links, renames, FIFOs, races) can reach past what it was given;
// everything that crosses is checked here, on the host side, where it is
// confined to the workspace (every path resolved beneath an open directory
// of it, never through a symlink), capped (never silently) and reported for
// the audit log.
//
// A change is applied only where the host file is still the one the run
// started from (its SHA-256 in the Snapshot), each file atomically;
// otherwise it is a conflict, reported by path, and the host file is left as
// it is. A session's own workspace is charged to per-uid and total budgets
// (Budget).
package workspace

import (
	"fmt"

	"github.com/skillbox/skillbox/policy/glob"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

// Mode is what policy lets a run do with a workspace.
type Mode string

const (
	ModeNone  Mode = "none"  // no workspace
	ModeRead  Mode = "read"  // files go in; nothing comes back
	ModeWrite Mode = "write" // files go in; the run's changes come back
)

// Caps bound what crosses a workspace in one run; a cap that leaves
// something out says so (api.WorkspaceFinding), it never truncates silently. Zero
// fields take the Default* values.
type Caps struct {
	Files     int   // entries copied in
	Bytes     int64 // bytes copied in, all files together
	FileBytes int64 // bytes of one file copied in or written back
}

// Options are what a Snapshot and an Apply follow.
type Options struct {
	// Excludes are patterns (see glob.Match) of paths neither copied in nor
	// written back, nor anything under them; nil is glob.DefaultExcludes, an
	// empty non-nil slice none. A pattern ending in "/" excludes a file of
	// that name too (the ".git" file of a git worktree).
	Excludes []string
	Caps     Caps
	// Owner, for Apply: who owns what it creates (nil: the writer).
	Owner *Owner
	// Quota, for Apply and WriteAt: the most bytes of regular files the
	// workspace may hold (a session's, which the daemon keeps); 0: no
	// quota. A write that would take it over is refused, by path.
	Quota int64
	// Account, for Apply, WriteAt and DeleteAccounted: the workspace's
	// part of a Budget (a session's; nil: none). What a write would grow
	// the workspace by is taken from it before the write, in one step
	// with the check of the uid's and the daemon's budget; a write it
	// refuses is refused as one over Quota is. Deletions give back.
	Account *Account
}

// Entry is what one path of the workspace was when the run started.
type Entry struct {
	Path   string            `json:"path"` // relative, "/"-separated
	Kind   runtime.InputKind `json:"kind"`
	Size   int64             `json:"size,omitempty"`
	SHA256 string            `json:"sha256,omitempty"` // regular files
	Mode   uint32            `json:"mode,omitempty"`   // permission bits
	Target string            `json:"target,omitempty"` // symlinks
}

// Snapshot is what a run was given from a workspace.
type Snapshot struct {
	// Files are the entries to write into /work (directories, regular
	// files, symlinks as symlinks).
	Files []runtime.InputFile
	// Entries are those entries as they were read, by path: the base a
	// change is applied against.
	Entries map[string]Entry
	// Refused are paths left out because of what they are (a special
	// file, a hard-linked file, a symlink pointing out of the workspace,
	// a name not valid in /work) or a cap; Excluded counts the paths an
	// exclude pattern left out (an excluded directory counts once).
	Refused  []api.WorkspaceFinding
	Excluded int
}

// Changes are what a run did to /work: the regular files it created or
// changed (runtime.Result.Outputs) and the inputs it removed
// (runtime.Result.Deleted).
type Changes struct {
	Written []runtime.OutputFile
	Deleted []string
}

// Report is what Apply did.
type Report struct {
	Written   []api.WorkspaceChange  `json:"written"`
	Deleted   []api.WorkspaceChange  `json:"deleted"`
	Conflicts []api.WorkspaceFinding `json:"conflicts"` // the host copy changed since the run started
	Refused   []api.WorkspaceFinding `json:"refused"`   // excluded, not allowed, in the way, over a cap
}

// Owner is the uid and gid that files and directories Apply creates are
// given (a daemon running as root writes into a user's directory); nil
// leaves them the writer's.
type Owner struct{ UID, GID int }

// MaxFindingsNamed bounds each list of findings a Snapshot or an Apply
// names one by one (a tree may hold any number of FIFOs); past it, one
// last finding counts the rest, so nothing is dropped silently.
const MaxFindingsNamed = 1000

// findingList adds findings to a list, naming MaxFindingsNamed of them; past
// that it counts them in more, and the list's last finding says how many.
type findingList struct {
	list *[]api.WorkspaceFinding
	more int // findings past the named ones
}

func (f *findingList) add(rel, format string, args ...any) {
	l := *f.list
	if f.more == 0 && len(l) < MaxFindingsNamed {
		*f.list = append(l, api.WorkspaceFinding{Path: rel, Why: fmt.Sprintf(format, args...)})
		return
	}
	f.more++
	last := api.WorkspaceFinding{Path: "...", Why: "and 1 more path, not named"}
	if f.more > 1 {
		last.Why = fmt.Sprintf("and %d more paths, not named", f.more)
		l[len(l)-1] = last
		return
	}
	*f.list = append(l, last)
}

// excludes are o's exclude patterns (glob.DefaultExcludes for nil), checked.
func (o Options) excludes() ([]string, error) {
	excludes := o.Excludes
	if excludes == nil {
		excludes = glob.DefaultExcludes
	}
	for _, p := range excludes {
		if err := glob.Check(p, "exclude pattern"); err != nil {
			return nil, err
		}
	}
	return excludes, nil
}
