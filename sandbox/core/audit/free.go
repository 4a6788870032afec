package audit

import "golang.org/x/sys/unix"

// FreeBytes is the space left to unprivileged writers on the filesystem
// that holds the log: the daemon refuses new runs below a watermark
// (audit min_free) so that the disk never fills up under it, since a full
// disk would refuse every audited call.
func (l *Log) FreeBytes() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(l.dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
