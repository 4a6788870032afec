//go:build !linux

package skills

import "errors"

// Snapshot is only implemented on Linux, where skills run.
func Snapshot(src, dst string, maxBytes int64) (string, error) {
	return "", errors.New("snapshot: skill snapshots need Linux")
}
