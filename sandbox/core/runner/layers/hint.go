package layers

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/skillbox/skillbox/images/deps"
)

var (
	pyMissingRE   = regexp.MustCompile(`ModuleNotFoundError: No module named '([A-Za-z0-9_.]+)'`)
	nodeMissingRE = regexp.MustCompile(`Cannot find (?:module|package) '([^'./][^']*)'`)
)

// ImportHint recognises a failed import in the stderr of a run of skill in
// image and says how to provide the module.
func (d *Deps) ImportHint(exitCode int, stderr []byte, image, skill string) string {
	if exitCode == 0 {
		return ""
	}
	if m := pyMissingRE.FindSubmatch(stderr); m != nil {
		mod, _, _ := strings.Cut(string(m[1]), ".")
		if extra := d.extraFor(image, mod); extra != "" {
			return fmt.Sprintf("module %q is the image extra %q of image %q, which is not installed: configure python_index { url = … } and run: skillbox images build %s", mod, extra, image, image)
		}
		return fmt.Sprintf("module %q is neither in image %q nor in the skill's dependency layer: declare its package in the skill's requirements.txt or a PEP 723 block (# /// script … dependencies = [...]) and configure python_index; skillbox skills check %s lists every missing import",
			mod, image, skill)
	}
	if m := nodeMissingRE.FindSubmatch(stderr); m != nil {
		return fmt.Sprintf("module %q is neither in image %q nor in the skill's dependency layer: declare it in the skill's package.json and configure npm_registry", string(m[1]), image)
	}
	return ""
}

// extraFor returns the extra of image whose module is mod, if any.
func (d *Deps) extraFor(image, mod string) string {
	if d == nil {
		return ""
	}
	for _, e := range d.extras[image] {
		if r, err := deps.ParseRequirement(e, "image "+image+" python_extras"); err == nil && deps.ModuleOf(r.Name) == mod {
			return e
		}
	}
	return ""
}

// Extras are the packages image's recipe names as extras.
func (d *Deps) Extras(image string) []string { return d.extras[image] }
