package workspace

import (
	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Owner returns who owns the open directory: the daemon lets a caller
// name only a directory of their own.
func (w *Workspace) Owner() (*Owner, error) {
	fd, done, err := w.root()
	if err != nil {
		return nil, err
	}
	defer done()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, errkind.Errorf(errkind.Unavailable, "workspace %s: %w", w.dir, err)
	}
	return &Owner{UID: int(st.Uid), GID: int(st.Gid)}, nil
}
