package workspace

import (
	"path/filepath"
	"strings"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// systemDirs are directories that are the system, not somebody's work: a
// workspace there (a host that starts skillbox mcp in /, a mistyped
// --workdir) would hand a run copies of the machine's configuration and
// secrets. They and everything under the pseudo file systems are refused.
var systemDirs = []string{"/", "/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/sbin", "/usr", "/var", "/home", "/root", "/srv", "/mnt", "/media"}

var pseudoFS = []string{"/proc", "/sys", "/dev", "/run"}

// checkNotSystem refuses a resolved workspace directory that is a system
// directory itself or lies in a pseudo file system.
func checkNotSystem(dir string) error {
	dir = filepath.Clean(dir)
	for _, s := range systemDirs {
		if dir == s {
			return errkind.Errorf(errkind.Denied, "workspace %s is a system directory, not a project: give the directory of the files the run works on (a project, a folder of documents)", dir)
		}
	}
	for _, p := range pseudoFS {
		if dir == p || strings.HasPrefix(dir, p+"/") {
			return errkind.Errorf(errkind.Denied, "workspace %s is in %s, which holds the system's state, not files to work on: give a directory of your own", dir, p)
		}
	}
	return nil
}

// IsSystemDir reports whether dir (resolved) could not be a workspace: a
// front end that defaults to its working directory (skillbox mcp) then
// takes none.
func IsSystemDir(dir string) bool { return checkNotSystem(dir) != nil }
