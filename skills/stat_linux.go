package skills

import (
	"io/fs"
	"syscall"
)

// linkCount is the number of hard links of the file behind fi.
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// changeStamp identifies a file version cheaply: inode and ctime change on
// every write, rename or chmod, so a stat-only walk detects edits.
func changeStamp(fi fs.FileInfo) (ino uint64, ctimeNs int64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino), int64(st.Ctim.Sec)*1e9 + int64(st.Ctim.Nsec)
	}
	return 0, 0
}
