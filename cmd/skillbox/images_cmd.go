package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/kubernetes"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
)

// imagesCommand is `skillbox images build|list|prune`: it builds the
// interpreter images sandboxes run from, with Debian's mmdebstrap, into an
// OCI layout on disk.
func imagesCommand() *cli.Command {
	dirFlag := &cli.StringFlag{
		Name:    "dir",
		Usage:   "image store directory",
		Value:   images.DefaultDir,
		EnvVars: []string{"SKILLBOX_IMAGES"},
	}
	recipesFlag := &cli.StringSliceFlag{
		Name:  "recipes",
		Usage: "directory of extra recipe files (*.hcl); a recipe there overrides the built-in one of the same name; repeatable",
	}
	return &cli.Command{
		Name:  "images",
		Usage: "build and list the interpreter images scripts run in",
		Subcommands: []*cli.Command{
			{
				Name:  "build",
				Usage: "build images from their recipes with mmdebstrap (all when no NAME is given)",
				Description: "Progress is one line per stage on stderr; a summary line per image goes to stdout.\n" +
					"mmdebstrap's full output is kept in DIR/logs/build-NAME.log (shown live with -v);\n" +
					"a failed build's error carries its last lines and names that file.",
				ArgsUsage: "[NAME...]",
				Flags: []cli.Flag{dirFlag, recipesFlag,
					&cli.BoolFlag{Name: "if-needed", Usage: "skip images that are built and match their recipe (for setup scripts and CI)"},
					&cli.BoolFlag{Name: "no-unpack", Usage: "do not unpack the rootfs cache after building"},
					&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
					&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "also show mmdebstrap's full output (it is kept in DIR/logs either way)"},
					&cli.StringFlag{Name: "config", Usage: "HCL config `FILE`: its python_index installs the recipes' extras (python_extras) as a dependency layer; with daemon { runtime = \"containerd\" } built images are imported into containerd too"},
				},
				Action: imagesBuild,
			},
			{
				Name:      "import",
				Usage:     "import built images into containerd's content store (for the containerd runtime; all built images when no NAME is given)",
				ArgsUsage: "--containerd [NAME...]",
				Flags: append([]cli.Flag{dirFlag, recipesFlag,
					&cli.BoolFlag{Name: "containerd", Usage: "import into containerd (the only target so far; required)"},
				}, containerdFlags()...),
				Action: imagesImport,
			},
			{
				Name:  "export",
				Usage: "write built images as one OCI archive, each named skillbox.local/NAME@DIGEST as the kubernetes runtime's pods name it (all built images when no NAME is given)",
				Description: "For Kubernetes nodes without a registry: import the archive into each node's containerd,\n" +
					"  skillbox images export --agent --out images.tar && ctr -n k8s.io images import images.tar\n" +
					"One line per image (name, digest, reference) goes to stdout, or to stderr with --out -.",
				ArgsUsage: "--out FILE|- [NAME...]",
				Flags: []cli.Flag{dirFlag, recipesFlag,
					&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "the archive's `FILE` (- for stdout; required)"},
					&cli.BoolFlag{Name: "agent", Usage: "add each image's agent image (the image with the pod agent's binary: data_path = \"agent\")"},
					&cli.StringFlag{Name: "agent-binary", Usage: "with --agent: the static skillbox `BINARY` the daemon's agent_binary names (default: this executable)"},
				},
				Action: imagesExport,
			},
			{
				Name:      "pull",
				Usage:     "pull a registry reference into containerd (where a registry is reachable)",
				ArgsUsage: "--containerd REF",
				Flags: append([]cli.Flag{
					&cli.BoolFlag{Name: "containerd", Usage: "pull into containerd (required)"},
				}, containerdFlags()...),
				Action: imagesPull,
			},
			{
				Name:  "list",
				Usage: "list built images (name, digest, size, age, stale) and recipes not built yet",
				Flags: []cli.Flag{dirFlag, recipesFlag,
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
					&cli.BoolFlag{Name: "layers", Usage: "with --json: print the dependency layers (digest, image, packages, size, users) instead of the images"},
				},
				Action: imagesList,
			},
			{
				Name:   "prune",
				Usage:  "delete blobs and rootfs trees no image refers to, and dependency layers of images no longer in the store (stop sandboxes on old images first)",
				Flags:  []cli.Flag{dirFlag},
				Action: imagesPrune,
			},
		},
	}
}

// imagesLogger logs warnings and errors to stderr; SKILLBOX_LOG_LEVEL=info
// or debug shows more.
func imagesLogger() hclog.Logger {
	return newLogger("skillbox", hclog.Warn, os.Stderr)
}

// openImages loads the recipes (built-in plus --recipes) and opens the store.
func openImages(c *cli.Context, logger hclog.Logger) (*images.Store, map[string]*images.Recipe, error) {
	recipes, err := images.LoadRecipes(c.StringSlice("recipes")...)
	if err != nil {
		return nil, nil, exitCode(2, "%v", err)
	}
	store, err := images.OpenStore(c.String("dir"), logger)
	if err != nil {
		return nil, nil, exitCode(1, "%v", err)
	}
	store.SetRecipes(recipes)
	return store, recipes, nil
}

func imagesBuild(c *cli.Context) error {
	logger := imagesLogger()
	store, recipes, err := openImages(c, logger)
	if err != nil {
		return err
	}
	var names []string
	for _, n := range c.Args().Slice() {
		if !slices.Contains(names, n) { // each image once per run
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		for n := range recipes {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	for _, n := range names {
		if _, ok := recipes[n]; !ok {
			known := make([]string, 0, len(recipes))
			for k := range recipes {
				known = append(known, k)
			}
			sort.Strings(known)
			return exitCode(2, "%v %q: no recipe has that name (known: %s); add a recipe file and pass its directory with --recipes",
				images.ErrUnknownImage, n, strings.Join(known, ", "))
		}
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := images.BuildOptions{Progress: os.Stderr, Unpack: !c.Bool("no-unpack")}
	if c.Bool("quiet") {
		opts.Progress = nil
	}
	if c.Bool("verbose") {
		opts.Log = os.Stderr
	}
	var failed []string
	importOne, closeImport, importErr := builtImporter(c, store)
	if closeImport != nil {
		defer closeImport()
	}
	// finish is what follows an image that is built (now or before): its
	// extras, and its import into containerd when the config runs there.
	finish := func(n string, img *images.Image) {
		if err := buildExtras(ctx, c, store, recipes[n], img); err != nil {
			fmt.Fprintf(os.Stderr, "skillbox: %v\n", err)
			failed = append(failed, n+" (extras)")
		}
		err := importErr
		if err == nil && importOne != nil {
			err = importOne(ctx, img)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "skillbox: %v\n", err)
			failed = append(failed, n+" (containerd import)")
		}
	}
	for _, n := range names {
		start := time.Now()
		if c.Bool("if-needed") {
			if img, err := store.Get(n); err == nil && !img.Stale {
				if !c.Bool("no-unpack") {
					if _, err := store.RootFS(ctx, img); err != nil {
						fmt.Fprintf(os.Stderr, "skillbox: %v\n", err)
						failed = append(failed, n)
						continue
					}
				}
				fmt.Fprintf(c.App.Writer, "%s\t%s\t%s\tup to date\n", img.Name, img.Digest, images.HumanSize(img.Size))
				finish(n, img)
				continue
			}
		}
		img, err := store.BuildWith(ctx, recipes[n], opts)
		if err != nil {
			fmt.Fprintf(os.Stderr, "skillbox: %v\n", err)
			failed = append(failed, n)
			if errors.Is(err, context.Canceled) {
				break
			}
			continue
		}
		fmt.Fprintf(c.App.Writer, "%s\t%s\t%s\t%s\n", img.Name, img.Digest, images.HumanSize(img.Size),
			time.Since(start).Round(time.Second))
		finish(n, img)
	}
	if len(failed) > 0 {
		return exitCode(1, "%d of %d image builds failed: %s", len(failed), len(names), strings.Join(failed, ", "))
	}
	return nil
}

// listEntry is one line of `images list --json`.
type listEntry struct {
	Name         string    `json:"name"`
	Built        bool      `json:"built"`
	Digest       string    `json:"digest,omitempty"`
	Size         int64     `json:"size,omitempty"`
	UnpackedSize int64     `json:"unpacked_size,omitempty"`
	Created      time.Time `json:"created,omitzero"`
	BuiltAt      time.Time `json:"built_at,omitzero"`
	Stale        bool      `json:"stale"`
	RecipeHash   string    `json:"recipe_hash,omitempty"`
	Recipe       string    `json:"recipe,omitempty"`
	Interpreters []string  `json:"interpreters,omitempty"`
}

func imagesList(c *cli.Context) error {
	store, recipes, err := openImages(c, imagesLogger())
	if err != nil {
		return err
	}
	imgs, err := store.List()
	if err != nil {
		return exitCode(1, "%v", err)
	}
	var entries []listEntry
	seen := map[string]bool{}
	for _, img := range imgs {
		seen[img.Name] = true
		e := listEntry{
			Name: img.Name, Built: true, Digest: img.Digest, Size: img.Size, UnpackedSize: img.UnpackedSize,
			Created: img.Created, BuiltAt: img.Built, Stale: img.Stale, RecipeHash: img.RecipeHash,
			Recipe: img.RecipeFile, Interpreters: img.Interpreters,
		}
		if r, ok := recipes[img.Name]; ok {
			e.Recipe = r.File
		}
		entries = append(entries, e)
	}
	for n, r := range recipes {
		if !seen[n] {
			entries = append(entries, listEntry{Name: n, Recipe: r.File, Interpreters: r.Interpreters})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	layers, err := deps.OpenStore(c.String("dir")).List()
	if err != nil {
		return exitCode(1, "dependency layers: %v", err)
	}
	if c.Bool("json") && c.Bool("layers") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if layers == nil {
			layers = []*deps.Layer{}
		}
		return enc.Encode(layers)
	}

	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if entries == nil {
			entries = []listEntry{}
		}
		return enc.Encode(entries)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDIGEST\tSIZE\tUNPACKED\tBUILT\tSTATE")
	for _, e := range entries {
		if !e.Built {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\tnot built (skillbox images build %s)\n", e.Name, e.Name)
			continue
		}
		state := "ok"
		if e.Stale {
			state = "stale: recipe changed (skillbox images build " + e.Name + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, shortDigest(e.Digest), images.HumanSize(e.Size),
			images.HumanSize(e.UnpackedSize), age(e.BuiltAt), state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(layers) == 0 {
		return nil
	}
	current := map[string]bool{}
	for _, img := range imgs {
		current[img.Digest] = true
	}
	fmt.Fprintln(c.App.Writer)
	tw = tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LAYER\tIMAGE\tPACKAGES\tSIZE\tBUILT\tUSERS")
	for _, l := range layers {
		var pkgs []string
		for _, a := range l.Artifacts {
			pkgs = append(pkgs, a.Name+"=="+a.Version)
		}
		users := slices.Sorted(maps.Keys(l.Users))
		img := l.Image
		if !current[l.ImageDigest] {
			img += " (gone: prune removes it)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", shortDigest(l.Digest), img, strings.Join(pkgs, ","),
			images.HumanSize(l.Size), age(l.Built), strings.Join(users, ","))
	}
	return tw.Flush()
}

// imagesExport writes built images as one archive of
// kubernetes.WriteImageArchive: the format `ctr images import` and
// hack/kube.sh import take, each image under the digest reference the
// kubernetes runtime's pods run.
func imagesExport(c *cli.Context) error {
	out := c.String("out")
	if out == "" {
		return exitCode(2, "usage: skillbox images export --out FILE|- [NAME...] (- writes the archive to stdout)")
	}
	store, _, err := openImages(c, imagesLogger())
	if err != nil {
		return err
	}
	var imgs []*images.Image
	if c.NArg() == 0 {
		if imgs, err = store.List(); err != nil {
			return exitCode(1, "%v", err)
		}
		if len(imgs) == 0 {
			return exitCode(1, "no built images in %s: build them first with skillbox images build", store.Dir())
		}
	}
	for _, name := range c.Args().Slice() {
		img, err := store.Get(name)
		if err != nil {
			return exitCode(1, "%v", err)
		}
		if !slices.ContainsFunc(imgs, func(i *images.Image) bool { return i.Name == img.Name }) {
			imgs = append(imgs, img)
		}
	}
	refs := make([]runtime.ImageRef, 0, len(imgs))
	for _, img := range imgs {
		refs = append(refs, runtime.ImageRef{Name: img.Name, Digest: img.Digest, Layout: store.LayoutDir()})
	}
	if c.Bool("agent") {
		bin := c.String("agent-binary")
		if bin == "" {
			if bin, err = os.Executable(); err != nil {
				return exitCode(1, "export: the agent's binary (this executable): %v", err)
			}
		}
		tmp, err := os.MkdirTemp("", "skillbox-agent-images-")
		if err != nil {
			return exitCode(1, "export: %v", err)
		}
		defer os.RemoveAll(tmp)
		agents, err := kubernetes.AgentImages(filepath.Join(tmp, "oci"), bin, refs...)
		if err != nil {
			return exitCode(1, "export: %v", err)
		}
		refs = append(refs, agents...)
	}
	report := c.App.Writer
	if out == "-" {
		report = c.App.ErrWriter
		if err := kubernetes.WriteImageArchive(c.App.Writer, refs...); err != nil {
			return exitCode(1, "export: %v", err)
		}
	} else if err := writeFileAtomic(out, func(w io.Writer) error { return kubernetes.WriteImageArchive(w, refs...) }); err != nil {
		return exitCode(1, "export: %v", err)
	}
	for i, r := range refs {
		ref, _ := kubernetes.ImageReference(r)
		name := r.Name
		if i >= len(imgs) {
			name += "+agent"
		}
		fmt.Fprintf(report, "%s\t%s\t%s\n", name, r.Digest, ref)
	}
	return nil
}

// writeFileAtomic writes path through write: a temporary file beside it,
// renamed over it once complete, so that a failed export leaves no
// partial archive under the name.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func imagesPrune(c *cli.Context) error {
	store, err := images.OpenStore(c.String("dir"), imagesLogger())
	if err != nil {
		return exitCode(1, "%v", err)
	}
	removed, err := store.Prune(c.Context)
	for _, p := range removed {
		fmt.Fprintln(c.App.Writer, "removed", p)
	}
	if err != nil {
		return exitCode(1, "%v", err)
	}
	// Dependency layers of images that are no longer in the store (the
	// image was rebuilt or removed): no new run can use them.
	imgs, err := store.List()
	if err != nil {
		return exitCode(1, "%v", err)
	}
	current := map[string]bool{}
	for _, img := range imgs {
		current[img.Digest] = true
	}
	removed, err = deps.OpenStore(c.String("dir")).Prune(func(l *deps.Layer) bool { return current[l.ImageDigest] })
	for _, p := range removed {
		fmt.Fprintln(c.App.Writer, "removed", p)
	}
	if err != nil {
		return exitCode(1, "dependency layers: %v", err)
	}
	return nil
}

// shortDigest keeps "sha256:" and 12 hex digits, enough to tell images
// apart on a terminal; --json has the full digest.
func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// age says how long ago t was, coarsely.
func age(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return plural(int(d.Minutes()), "minute") + " ago"
	case d < 48*time.Hour:
		return plural(int(d.Hours()), "hour") + " ago"
	default:
		return plural(int(d.Hours()/24), "day") + " ago"
	}
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// buildExtras installs recipe r's python_extras on img as a dependency
// layer (the same safe path as a skill's: wheels only, offline install,
// hashes recorded), when --config names a python_index; without one it
// says which extras are missing and how to provide them.
func buildExtras(ctx context.Context, c *cli.Context, store *images.Store, r *images.Recipe, img *images.Image) error {
	if r == nil || len(r.PythonExtras) == 0 {
		return nil
	}
	cfg, err := loadConfig(c.String("config"))
	if err != nil {
		return err
	}
	src := cfg.Sources
	if src.PythonIndex == "" && len(src.FindLinks) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "skillbox: %s: extras not installed (no python_index configured): %s; pass --config with python_index { url = … } to add them\n",
			r.Name, strings.Join(r.PythonExtras, ", "))
		return nil
	}
	if c.Bool("no-unpack") {
		return fmt.Errorf("%s: extras need the unpacked rootfs: drop --no-unpack", r.Name)
	}
	rootfs, err := store.RootFS(ctx, img)
	if err != nil {
		return err
	}
	// The extras are optional: those the source lacks are left out, said here.
	l, left, err := stack.BuildImageExtras(ctx, cfg, c.String("dir"), r, img, rootfs, newLogger("skillbox", hclog.Warn, os.Stderr))
	for _, o := range left {
		fmt.Fprintf(c.App.ErrWriter, "skillbox: %s: extra %s not installed: %s\n", r.Name, o.Name, o.Why)
	}
	if err != nil {
		return err
	}
	if l == nil && len(left) > 0 {
		return nil
	}
	if l == nil {
		fmt.Fprintf(c.App.Writer, "%s\textras\tin the image already\n", r.Name)
		return nil
	}
	var pkgs []string
	for _, a := range l.Artifacts {
		pkgs = append(pkgs, a.Name+"=="+a.Version)
	}
	fmt.Fprintf(c.App.Writer, "%s\textras\t%s\t%s\n", r.Name, l.Digest, strings.Join(pkgs, ","))
	return nil
}
