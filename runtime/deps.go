package runtime

import (
	"path"
	"strings"
)

// DepsMount is where a run's dependency layer is mounted read-only. /opt is
// a directory in every Debian image (base-files) and empty in skillbox's, so
// no mount point has to be made in the read-only image.
const DepsMount = "/opt"

// Layer subdirectories the module path points at.
const (
	DepsPythonDir = DepsMount + "/python"
	DepsNodeDir   = DepsMount + "/node_modules"
)

// WithDepsPath adds the dependency layer to the module path entries of
// family (see ModulePathEnv): after the skill's own directories, before the
// image's site packages, so a skill's own module wins over a dependency and
// a dependency over the image's copy.
func WithDepsPath(moduleEnv []string, family string) []string {
	fam, _, _ := strings.Cut(family, "-")
	var name, dir string
	switch fam {
	case "python":
		name, dir = "PYTHONPATH", DepsPythonDir
	case "node":
		name, dir = "NODE_PATH", DepsNodeDir
	default:
		return moduleEnv
	}
	out := make([]string, 0, len(moduleEnv)+1)
	found := false
	for _, kv := range moduleEnv {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			found = true
			kv = name + "=" + path.Clean(v) + ":" + dir
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, name+"="+dir)
	}
	return out
}
