package images

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/skillbox/skillbox/images/deps"
)

// defaultRecipeFS holds the recipes shipped in the binary, so a fresh machine
// can build every default image without a checkout of this repository.
//
//go:embed recipes/*.hcl
var defaultRecipeFS embed.FS

// Recipe defaults, applied when a recipe leaves the attribute out.
const (
	DefaultSuite  = "trixie"
	DefaultMirror = "http://deb.debian.org/debian"
	// DefaultVariant is mmdebstrap's "essential": the Essential:yes set plus
	// the recipe's packages (installed by apt running outside the chroot), so
	// the image carries neither apt nor its keyring — a sandbox never installs
	// anything at run time, and fewer binaries is less to attack.
	DefaultVariant = "essential"
)

// buildFormat is folded into every recipe hash. Bump it whenever the way a
// recipe turns into an image changes (mmdebstrap options, layer
// normalisation, config fields), so existing images show up as stale.
const buildFormat = "skillbox-images/5"

// Recipe says how to build one interpreter image with mmdebstrap.
type Recipe struct {
	// Name is the block label: `image "python" { … }`. It names the image in
	// the store, on the command line and in the config's image blocks.
	Name string
	// Suite is the Debian suite (trixie).
	Suite string
	// Mirror is the Debian mirror the suite comes from.
	Mirror string
	// Variant is the mmdebstrap package-set variant.
	Variant string
	// Sources are extra apt lines ("deb URI SUITE COMPONENT…"), such as the
	// security and updates suites, searched together with Mirror. A recipe
	// that leaves them out gets defaultSources.
	Sources []string
	// Packages are installed on top of the variant's set.
	Packages []string
	// Interpreters are the commands the image provides, matched against a
	// script's shebang when its extension does not pick an image.
	Interpreters []string
	// Notes are for people: what the image holds and what it lacks.
	Notes string
	// PythonExtras and NpmExtras are packages Debian does not ship that
	// hosted interpreters do: they are installed as a dependency layer on
	// top of the image (images/deps) when a package source is configured,
	// and reported as missing when not. They are not part of Hash: the
	// image's bytes do not depend on them.
	PythonExtras []string
	NpmExtras    []string
	// File is where the recipe came from ("builtin:recipes/python.hcl" or a
	// path), so errors and `images list` can point at it.
	File string
}

// recipeFileHCL is the shape of one recipe file.
type recipeFileHCL struct {
	Images []*recipeHCL `hcl:"image,block"`
}

type recipeHCL struct {
	Name         string    `hcl:"name,label"`
	Suite        string    `hcl:"suite,optional"`
	Mirror       string    `hcl:"mirror,optional"`
	Variant      string    `hcl:"variant,optional"`
	Sources      []string  `hcl:"sources,optional"`
	Packages     []string  `hcl:"packages"`
	Interpreters []string  `hcl:"interpreters"`
	Notes        string    `hcl:"notes,optional"`
	PythonExtras []string  `hcl:"python_extras,optional"`
	NpmExtras    []string  `hcl:"npm_extras,optional"`
	DefRange     hcl.Range `hcl:",def_range"`
}

var (
	// Image names become directory names, lock file names and OCI ref
	// names, so they are kept to a conservative alphabet.
	nameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	suiteRE = regexp.MustCompile(`^[a-z][a-z0-9.-]{0,62}$`)
	// Debian policy §5.6.1 package names. Anything else (apt patterns,
	// "pkg=version", paths to .deb files) would let a recipe smuggle options
	// into mmdebstrap's --include, so it is refused.
	packageRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	interpreterRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)
	sourceRE      = regexp.MustCompile(`^deb (\[[^\]\n]*\] )?[a-z+]+://[^\s]+ [a-z][a-z0-9./-]* [a-z0-9-]+( [a-z0-9-]+)*$`)
	variants      = []string{"essential", "apt", "required", "minbase", "buildd", "important", "standard"}
)

// DefaultRecipes returns the recipes built into the binary, keyed by name.
func DefaultRecipes() (map[string]*Recipe, error) {
	out := map[string]*Recipe{}
	entries, err := fs.ReadDir(defaultRecipeFS, "recipes")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".hcl") {
			continue
		}
		p := path.Join("recipes", e.Name())
		src, err := defaultRecipeFS.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rs, err := parseRecipes(src, "builtin:"+p)
		if err != nil {
			return nil, err
		}
		if err := addRecipes(out, rs, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LoadRecipes returns the default recipes overridden and extended by the
// *.hcl files in dirs. A later directory overrides an earlier one, so a user
// can keep a site-wide directory and a personal one. Within one directory two
// files defining the same name is an error, because which one wins would
// depend on file names rather than on the user's intent.
func LoadRecipes(dirs ...string) (map[string]*Recipe, error) {
	out, err := DefaultRecipes()
	if err != nil {
		return nil, err
	}
	for _, dir := range dirs {
		files, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("recipe directory %s: %w (pass an existing directory to --recipes)", dir, err)
		}
		seen := map[string]*Recipe{}
		for _, f := range files {
			if f.IsDir() || !strings.HasSuffix(f.Name(), ".hcl") {
				continue
			}
			p := filepath.Join(dir, f.Name())
			src, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			rs, err := parseRecipes(src, p)
			if err != nil {
				return nil, err
			}
			if err := addRecipes(out, rs, seen); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// addRecipes puts rs into out; seen (nil for the built-in set) catches two
// definitions of one name at the same precedence level.
func addRecipes(out map[string]*Recipe, rs []*Recipe, seen map[string]*Recipe) error {
	for _, r := range rs {
		if seen != nil {
			if prev, ok := seen[r.Name]; ok {
				return fmt.Errorf("%s: image %q is already defined in %s; keep one of them", r.File, r.Name, prev.File)
			}
			seen[r.Name] = r
		}
		out[r.Name] = r
	}
	return nil
}

// ParseRecipe decodes the recipe file src (named filename in errors). It is
// strict: unknown attributes and blocks are errors carrying file:line.
func ParseRecipe(src []byte, filename string) ([]*Recipe, error) {
	return parseRecipes(src, filename)
}

func parseRecipes(src []byte, filename string) ([]*Recipe, error) {
	f, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, fmt.Errorf("recipe %w", diags)
	}
	var raw recipeFileHCL
	if diags := gohcl.DecodeBody(f.Body, nil, &raw); diags.HasErrors() {
		return nil, fmt.Errorf("recipe %w", diags)
	}
	if len(raw.Images) == 0 {
		return nil, fmt.Errorf("%s: no image block; a recipe file holds `image \"NAME\" { … }`", filename)
	}
	var out []*Recipe
	names := map[string]bool{}
	for _, b := range raw.Images {
		r := &Recipe{
			Name:         b.Name,
			Suite:        b.Suite,
			Mirror:       b.Mirror,
			Variant:      b.Variant,
			Sources:      b.Sources,
			Packages:     b.Packages,
			Interpreters: b.Interpreters,
			Notes:        strings.TrimSpace(b.Notes),
			PythonExtras: b.PythonExtras,
			NpmExtras:    b.NpmExtras,
			File:         filename,
		}
		if r.Suite == "" {
			r.Suite = DefaultSuite
		}
		if r.Mirror == "" {
			r.Mirror = DefaultMirror
		}
		if r.Variant == "" {
			r.Variant = DefaultVariant
		}
		if b.Sources == nil { // absent; `sources = []` asks for none
			r.Sources = defaultSources(r.Suite, r.Mirror)
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", rangeString(b.DefRange), err)
		}
		if names[r.Name] {
			return nil, fmt.Errorf("%s: image %q is defined twice in this file", rangeString(b.DefRange), r.Name)
		}
		names[r.Name] = true
		out = append(out, r)
	}
	return out, nil
}

// defaultSources are the apt lines of a recipe that names none: on the
// default mirror, the suite's updates and its security archive, so images
// carry the fixes published since the release; none for a suite that has
// neither (sid, unstable, experimental) or another mirror (whose security
// archive, if any, only the recipe can name).
func defaultSources(suite, mirror string) []string {
	if mirror != DefaultMirror || slices.Contains([]string{"sid", "unstable", "experimental"}, suite) {
		return nil
	}
	return []string{
		"deb http://deb.debian.org/debian " + suite + "-updates main",
		"deb http://deb.debian.org/debian-security " + suite + "-security main",
	}
}

func rangeString(r hcl.Range) string {
	return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
}

// Validate checks the fields that end up on mmdebstrap's command line and in
// store paths, so a bad recipe fails before a long build starts.
func (r *Recipe) Validate() error {
	if !nameRE.MatchString(r.Name) {
		return fmt.Errorf("image name %q: use lower-case letters, digits, '.', '_' or '-'", r.Name)
	}
	if !suiteRE.MatchString(r.Suite) {
		return fmt.Errorf("image %q: suite %q is not a Debian suite name", r.Name, r.Suite)
	}
	u, err := url.Parse(r.Mirror)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file") || strings.ContainsAny(r.Mirror, " \t\n") {
		return fmt.Errorf("image %q: mirror %q must be an http, https or file URL", r.Name, r.Mirror)
	}
	if !slices.Contains(variants, r.Variant) {
		return fmt.Errorf("image %q: variant %q: use one of %s", r.Name, r.Variant, strings.Join(variants, ", "))
	}
	for _, s := range r.Sources {
		if !sourceRE.MatchString(s) {
			return fmt.Errorf("image %q: source %q: write it as \"deb URI SUITE COMPONENT…\"", r.Name, s)
		}
	}
	if len(r.Packages) == 0 {
		return fmt.Errorf("image %q: packages is empty; list at least the interpreter's package", r.Name)
	}
	for _, p := range r.Packages {
		if !packageRE.MatchString(p) {
			return fmt.Errorf("image %q: package %q is not a Debian package name", r.Name, p)
		}
	}
	for _, e := range r.PythonExtras {
		if _, err := deps.ParseRequirement(e, "python_extras"); err != nil {
			return fmt.Errorf("image %q: %v", r.Name, err)
		}
	}
	for _, e := range r.NpmExtras {
		if _, err := deps.ParseNpmSpec(e, "npm_extras"); err != nil {
			return fmt.Errorf("image %q: %v", r.Name, err)
		}
	}
	if len(r.Interpreters) == 0 {
		return fmt.Errorf("image %q: interpreters is empty; name the commands the image provides (e.g. [\"python3\"])", r.Name)
	}
	for _, i := range r.Interpreters {
		if !interpreterRE.MatchString(i) {
			return fmt.Errorf("image %q: interpreter %q must be a bare command name", r.Name, i)
		}
	}
	return nil
}

// Hash identifies what the recipe builds: "sha256:" and the hex digest of the
// fields that shape the image (suite, mirror, variant, sources, the package
// set in any order, interpreters) and of the build format. Notes and the file
// name are left out so that editing prose does not mark an image stale and
// force a rebuild that would produce the same bytes.
func (r *Recipe) Hash() string {
	pkgs := slices.Clone(r.Packages)
	sort.Strings(pkgs)
	pkgs = slices.Compact(pkgs)
	canon := struct {
		Format       string   `json:"format"`
		Suite        string   `json:"suite"`
		Mirror       string   `json:"mirror"`
		Variant      string   `json:"variant"`
		Sources      []string `json:"sources"`
		Packages     []string `json:"packages"`
		Interpreters []string `json:"interpreters"`
	}{buildFormat, r.Suite, r.Mirror, r.Variant, r.Sources, pkgs, r.Interpreters}
	b, err := json.Marshal(canon)
	if err != nil {
		panic(err) // strings and slices of strings always marshal
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// errUnknown builds the ErrUnknownImage error listing what is known.
func errUnknown(name string, recipes map[string]*Recipe) error {
	known := make([]string, 0, len(recipes))
	for n := range recipes {
		known = append(known, n)
	}
	sort.Strings(known)
	return fmt.Errorf("%w %q: no recipe has that name (known: %s); add a recipe file and pass its directory with --recipes",
		ErrUnknownImage, name, strings.Join(known, ", "))
}
