//go:build !linux

package skills

import "os"

// openConfined falls back to os.Root where openat2 does not exist; it
// refuses symlinks that leave root, and checkRegular does the rest.
func openConfined(root, rel string) (*os.File, error) {
	return openWithRoot(root, rel)
}
