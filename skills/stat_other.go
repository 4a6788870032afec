//go:build !linux

package skills

import "io/fs"

// linkCount is not checked off Linux, where the daemon never runs.
func linkCount(fs.FileInfo) uint64 { return 1 }

func changeStamp(fs.FileInfo) (uint64, int64) { return 0, 0 }
