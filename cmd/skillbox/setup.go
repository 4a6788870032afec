package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	_ "github.com/skillbox/skillbox/runtime/containerd" // registers the containerd backend
	_ "github.com/skillbox/skillbox/runtime/ocicli"     // registers the runsc and runc backends
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/sandbox/service"
	"github.com/skillbox/skillbox/skills"
)

// loadConfig reads the config file, or the built-in defaults when path is "".
func loadConfig(path string) (*policy.Config, error) {
	if path == "" {
		return policy.Default(), nil
	}
	cfg, err := policy.Load(path)
	if err != nil {
		return nil, configError(path, err)
	}
	return cfg, nil
}

// configError renders a config failure as one line: every problem with its
// file:line, joined, and what to run for the full explanation.
func configError(path string, err error) error {
	var ce *policy.ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) == 0 {
		return fmt.Errorf("config %s: %w", path, err)
	}
	msgs := make([]string, len(ce.Problems))
	for i, p := range ce.Problems {
		msgs[i] = strings.Join(strings.Fields(p.String()), " ")
	}
	what := "invalid config"
	if len(msgs) > 1 {
		what = fmt.Sprintf("invalid config (%d problems)", len(msgs))
	}
	return &oneLineError{msg: fmt.Sprintf("%s: %s (details: skillbox policy check %s)", what, strings.Join(msgs, "; "), path), err: err}
}

// oneLineError replaces a multi-line error's text, keeping it for errors.Is.
type oneLineError struct {
	msg string
	err error
}

func (e *oneLineError) Error() string { return e.msg }
func (e *oneLineError) Unwrap() error { return e.err }

// EnvLogLevel is the one environment variable that sets the log level of
// every skillbox command (trace, debug, info, warn, error, off).
const EnvLogLevel = "SKILLBOX_LOG_LEVEL"

// newLogger is the CLI's hclog root; level from SKILLBOX_LOG_LEVEL (default
// warn for one-shot commands, info for serve).
func newLogger(name string, def hclog.Level, w io.Writer) hclog.Logger {
	lvl := def
	if v := os.Getenv(EnvLogLevel); v != "" {
		if l := hclog.LevelFromString(v); l != hclog.NoLevel {
			lvl = l
		}
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: lvl, Output: w})
}

// openRegistry indexes the given roots (or the config's) once.
func openRegistry(ctx context.Context, cfg *policy.Config, roots []string, log hclog.Logger) (*skills.Registry, error) {
	if len(roots) == 0 {
		roots = cfg.Skills.Roots
	}
	abs := make([]string, 0, len(roots))
	for _, r := range roots {
		a, err := filepath.Abs(r)
		if err != nil {
			return nil, err
		}
		abs = append(abs, a)
	}
	reg, err := skills.NewRegistry(skills.RegistryOptions{
		Roots:           abs,
		MaxDepth:        cfg.Skills.MaxDepth,
		MaxSkills:       cfg.Skills.MaxSkills,
		AllowExtensions: true, // lenient indexing: cosmetic problems become warnings
		Logger:          log.Named("skills"),
	})
	if err != nil {
		return nil, err
	}
	if err := reg.Reload(ctx); err != nil {
		return nil, err
	}
	return reg, nil
}

// engineOptions are the knobs the CLI exposes over the config.
type engineOptions struct {
	runtime string // overrides daemon.runtime
	// containerdAddress overrides runtime "containerd" { address }.
	containerdAddress string
	imageDir          string // overrides images.dir
	noBuild           bool
	progress          io.Writer
	audit             *audit.Log
}

// newEngine builds the run engine the daemon and `skillbox run` share.
func newEngine(cfg *policy.Config, o engineOptions, log hclog.Logger) (*service.Engine, error) {
	name := cfg.Daemon.Runtime
	if o.runtime != "" {
		name = o.runtime
	}
	ropts := cfg.RuntimeOptions(name)
	if o.containerdAddress != "" && name == "containerd" { // only containerd has an address
		ropts.Settings["address"] = o.containerdAddress
	}
	ropts.Logger = log.Named("runtime." + name)
	rt, err := runtime.New(name, ropts)
	if err != nil {
		return nil, err
	}
	dir := cfg.Images.Dir
	if o.imageDir != "" {
		dir = o.imageDir
	} else if v := os.Getenv("SKILLBOX_IMAGES"); v != "" {
		dir = v
	}
	store, err := images.OpenStore(dir, log.Named("images"))
	if err != nil {
		return nil, err
	}
	recipes, err := images.LoadRecipes(cfg.Images.RecipesDirs...)
	if err != nil {
		return nil, err
	}
	store.SetRecipes(recipes)
	byImage, err := recipesByImage(cfg, recipes)
	if err != nil {
		return nil, err
	}
	si := &service.StoreImages{Store: store, Recipes: byImage, Build: !o.noBuild, Registry: registryImages(cfg)}
	if p, ok := rt.(service.RegistryPuller); ok {
		si.Puller = p
	}
	eng := &service.Engine{
		Config:   cfg,
		Images:   si,
		Runtime:  rt,
		Pins:     &service.SnapshotStore{Dir: service.DefaultSnapshotDir},
		Logger:   log.Named("engine"),
		Progress: o.progress,
	}
	if o.audit != nil {
		eng.Audit = o.audit
	}
	eng.Deps = newDeps(cfg, dir, rt, eng.Images, log)
	eng.Deps.Audit = eng.Audit
	for name, r := range byImage {
		if len(r.PythonExtras) > 0 {
			if eng.Deps.Extras == nil {
				eng.Deps.Extras = map[string][]string{}
			}
			// Runs name the image by config block or by recipe.
			eng.Deps.Extras[name] = r.PythonExtras
			eng.Deps.Extras[r.Name] = r.PythonExtras
		}
	}
	if eng.Egress.Hosts, err = cfg.Egress.LoadHosts(); err != nil {
		return nil, err
	}
	if eng.Egress.UpstreamRoots, err = cfg.Egress.UpstreamRoots(); err != nil {
		return nil, err
	}
	return eng, nil
}

// newDeps is the dependency layers of runs: stored beside the images in
// dir, built with rt, from the config's package sources.
func newDeps(cfg *policy.Config, dir string, rt runtime.Runtime, imgs service.ImageSource, log hclog.Logger) *service.Deps {
	src := cfg.Sources
	return &service.Deps{
		Builder: &deps.Builder{
			Store:   deps.OpenStore(dir),
			Runtime: rt,
			Sources: deps.Sources{PythonIndex: src.PythonIndex, FindLinks: src.FindLinks, NpmRegistry: src.NpmRegistry},
			Logger:  log.Named("deps"),
			// Bounds the layer's size and the daemon's memory during its build.
			MaxLayerBytes: cfg.Deps.MaxLayerBytes,
		},
		Config: cfg,
		Images: imgs,
		Logger: log.Named("deps"),
	}
}

// openAudit opens the config's audit log, or returns nil when it names none.
func openAudit(cfg *policy.Config, log hclog.Logger) (*audit.Log, error) {
	if cfg.Daemon.AuditDir == "" {
		return nil, nil
	}
	key, err := cfg.Audit.LoadCheckpointKey()
	if err != nil {
		return nil, err
	}
	l, err := audit.Open(cfg.Daemon.AuditDir, audit.Options{
		RotateBytes:     cfg.Audit.RotateBytes,
		RotateAge:       cfg.Audit.RotateAge,
		SigningKey:      key,
		CheckpointEvery: cfg.Audit.CheckpointInterval,
		Logger:          log.Named("audit"),
	})
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", cfg.Daemon.AuditDir, err)
	}
	return l, nil
}

// recipesByImage maps each config image block to the recipe it names
// (image "py3" { recipe = "python" } runs in the python image), so a block
// naming a recipe that does not exist is caught at start, not at a run.
// registryImages maps the config's registry images to their references.
func registryImages(cfg *policy.Config) map[string]string {
	out := map[string]string{}
	for _, im := range cfg.Images.List {
		if im.Ref != "" {
			out[im.Name] = im.Ref
		}
	}
	return out
}

func recipesByImage(cfg *policy.Config, recipes map[string]*images.Recipe) (map[string]*images.Recipe, error) {
	out := make(map[string]*images.Recipe, len(cfg.Images.List))
	for _, im := range cfg.Images.List {
		if im.Ref != "" {
			continue // pulled, not built
		}
		r, ok := recipes[im.Recipe]
		if !ok {
			known := make([]string, 0, len(recipes))
			for n := range recipes {
				known = append(known, n)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("%s: recipe %q does not exist (known recipes: %s): add a recipe file to images.recipes_dirs or fix the block",
				im.Rule(), im.Recipe, strings.Join(known, ", "))
		}
		out[im.Name] = r
	}
	return out, nil
}
