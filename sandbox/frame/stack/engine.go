package stack

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
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/policy/replicaname"
	"github.com/skillbox/skillbox/runtime"
	_ "github.com/skillbox/skillbox/runtime/containerd" // registers the containerd backend
	"github.com/skillbox/skillbox/runtime/kubernetes"   // registers the kubernetes backend
	_ "github.com/skillbox/skillbox/runtime/ocicli"     // registers the runsc and runc backends
	"github.com/skillbox/skillbox/runtime/rootless"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/skills"
)

// OpenRegistry indexes the given roots (or the config's) once.
func OpenRegistry(ctx context.Context, cfg *policy.Config, roots []string, log hclog.Logger) (*skills.Registry, error) {
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

// OpenAudit opens the config's audit log, or returns nil when it names none.
// A daemon with daemon.replica set writes its own chain in
// <audit_dir>/<replica>/, so replicas can share one audit volume; one
// without writes in audit_dir itself, named by the host name.
func OpenAudit(cfg *policy.Config, log hclog.Logger) (*audit.Log, error) {
	if cfg.Daemon.AuditDir == "" {
		return nil, nil
	}
	key, err := cfg.Audit.LoadCheckpointKey()
	if err != nil {
		return nil, err
	}
	dir, replica := cfg.Daemon.AuditDir, cfg.Daemon.Replica
	if replica != "" {
		dir = audit.ReplicaDir(dir, replica)
	} else if replica, err = replicaname.Default(); err != nil {
		return nil, fmt.Errorf("config %s: %w", cfg.File, err)
	}
	l, err := audit.Open(dir, audit.Options{
		Replica:         replica,
		RotateBytes:     cfg.Audit.RotateBytes,
		RotateAge:       cfg.Audit.RotateAge,
		SigningKey:      key,
		CheckpointEvery: cfg.Audit.CheckpointInterval,
		Logger:          log.Named("audit"),
	})
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", dir, err)
	}
	return l, nil
}

// engineOptions are how a mode makes its engine.
type engineOptions struct {
	runtime           string // overrides daemon.runtime
	containerdAddress string // overrides runtime "containerd" { address }
	imageDir          string // overrides images.dir
	build             bool   // a missing image is built inside the run
	checkImages       bool   // warn at start about images that are not built
	progress          io.Writer
	wrap              func(*runner.StoreImages) runner.ImageSource
	journal           *audit.Journal
	pins              *runner.SnapshotStore
	// checkpoints is where paused session sandboxes go: the daemon's
	// state dir; "" (other modes) keeps none.
	checkpoints string
	logger      hclog.Logger
	// prepare, when set, is the mode's start on the runtime before the
	// engine exists; it may return the warm pool.
	prepare func(runtime.Runtime) (*runtime.Pool, error)
	// onImageBuild, when set, hears of every image build (the metrics).
	onImageBuild func(image string, err error)
}

// newEngine builds the run engine every front end shares.
func newEngine(cfg *policy.Config, o engineOptions, log hclog.Logger) (*runner.Engine, error) {
	name, ropts := runtimeOptions(cfg, RuntimeOptions{Name: o.runtime, ContainerdAddress: o.containerdAddress})
	ropts.Logger = log.Named("runtime." + name)
	if rootless.Active() {
		if err := rootlessOptions(name, &ropts, log); err != nil {
			return nil, err
		}
	}
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
	store.OnBuild(o.onImageBuild)
	byImage, err := RecipesByImage(cfg, recipes)
	if err != nil {
		return nil, err
	}
	si := &runner.StoreImages{Store: store, Recipes: byImage, Build: o.build, Registry: registryImages(cfg)}
	if p, ok := rt.(runner.RegistryPuller); ok {
		si.Puller = p
	}
	eo := runner.EgressOptions{}
	if eo.Hosts, err = cfg.Egress.LoadHosts(); err != nil {
		return nil, err
	}
	if eo.UpstreamRoots, err = cfg.Egress.UpstreamRoots(); err != nil {
		return nil, err
	}
	if o.checkImages {
		CheckImages(cfg, si, log.Named("images"))
	}
	var pool *runtime.Pool
	if o.prepare != nil {
		if pool, err = o.prepare(rt); err != nil {
			return nil, err
		}
	}
	var extras map[string][]string
	for name, r := range byImage {
		if len(r.PythonExtras) > 0 {
			if extras == nil {
				extras = map[string][]string{}
			}
			// Runs name the image by config block or by recipe.
			extras[name] = r.PythonExtras
			extras[r.Name] = r.PythonExtras
		}
	}
	var rec audit.Recorder
	if o.journal != nil {
		rec = o.journal
	}
	dp := runner.NewDeps(runner.DepsOptions{
		Builder: depsBuilder(cfg, rt, dir, log),
		Config:  cfg,
		Images:  si,
		Logger:  log.Named("deps"),
		Audit:   rec,
		Extras:  extras,
	})
	var imgs runner.ImageSource = si
	if o.wrap != nil {
		imgs = o.wrap(si)
	}
	sessions := newSessionSandboxes(cfg, rt, o.pins, o.checkpoints, rec, log)
	return runner.New(runner.Options{
		Config:   cfg,
		Images:   imgs,
		Runtime:  rt,
		Pool:     pool,
		Pins:     o.pins,
		Audit:    rec,
		Logger:   o.logger,
		Progress: o.progress,
		Egress:   eo,
		Deps:     dp,
		Sessions: sessions,
	}), nil
}

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

// RecipesByImage maps each config image block to the recipe it names
// (image "py3" { recipe = "python" } runs in the python image), so a block
// naming a recipe that does not exist is caught at start, not at a run.
func RecipesByImage(cfg *policy.Config, recipes map[string]*images.Recipe) (map[string]*images.Recipe, error) {
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

// CheckImages warns at start-up about every configured image that is not
// built, naming the command that builds it.
func CheckImages(cfg *policy.Config, si *runner.StoreImages, log hclog.Logger) {
	for _, im := range cfg.Images.List {
		err := si.Built(im.Name)
		switch {
		case err == nil:
		case im.Ref != "":
			log.Warn("registry image cannot run on this runtime; scripts that need it are refused", "image", im.Name, "ref", im.Ref, "error", err)
		case errors.Is(err, images.ErrNotBuilt):
			what := "scripts that need it are refused (unavailable) until it is built"
			if si.Build {
				what = "the first script that needs it builds it (images.build_on_demand), which takes minutes"
			}
			log.Warn("image is not built; "+what, "image", im.Name, "extensions", strings.Join(im.Extensions, " "),
				"dir", si.Store.Dir(), "fix", runner.BuildCommand(si.Store.Dir(), im.Recipe))
		case errors.Is(err, images.ErrUnknownImage):
			log.Warn("image has no recipe; scripts that need it cannot run", "image", im.Name, "error", err)
		default:
			log.Warn("cannot tell whether the image is built", "image", im.Name, "error", err)
		}
	}
}

// rootlessOptions makes ropts those of an ordinary user's runtime (see
// runtime/rootless): gVisor rootless, with its run dir and state dir in
// the user's state directory, never the system's; or the kubernetes
// runtime, whose pods run on the cluster, with its state dir there too.
// The other backends need root.
func rootlessOptions(name string, ropts *runtime.Options, log hclog.Logger) error {
	if name == kubernetes.Name {
		// Nothing of a run is made on this host: the user's own state
		// dir keeps the instance id that labels their pods.
		dirs, err := rootless.UserDirs()
		if err != nil {
			return err
		}
		ropts.Rootless = true
		ropts.Settings["state_dir"] = dirs.State(kubernetes.Name)
		return nil
	}
	if name != "runsc" {
		return runtime.RefuseRootless(name)
	}
	dirs, err := rootless.UserDirs()
	if err != nil {
		return err
	}
	bin, _ := ropts.Settings["binary"].(string)
	ropts.Rootless = true
	ropts.RunDir = dirs.Runs()
	ropts.Settings["state_dir"] = dirs.State(filepath.Base(runtime.RunscStateDir(bin)))
	// The kernel holds the limits when the user has a cgroup subtree to
	// give; otherwise skillbox does, and every result says which.
	if cg, err := rootless.DelegatedCgroup(); err == nil {
		ropts.Delegated = &runtime.DelegatedCgroup{Path: cg.Path, CPU: cg.CPU}
		log.Debug("runs get cgroups in the delegated subtree", "cgroup", cg.Path, "cpu", cg.CPU)
	} else {
		log.Debug("no delegated cgroup: skillbox watches memory, gVisor bounds tasks, CPU is not limited", "why", err)
	}
	return nil
}

// snapshotDir is where the engine keeps skill snapshots: the system's, or
// the user's when rootless.
func snapshotDir() string {
	if rootless.Active() {
		if dirs, err := rootless.UserDirs(); err == nil {
			return dirs.Snapshots()
		}
	}
	return runner.DefaultSnapshotDir
}

// newSessionSandboxes is the keeper of isolation = "session" sandboxes:
// beside the skill snapshots, with this binary as the supervisor inside.
// A runtime that cannot keep them leaves it without a backend, so such
// runs are refused saying why.
func newSessionSandboxes(cfg *policy.Config, rt runtime.Runtime, pins *runner.SnapshotStore, checkpoints string, rec audit.Recorder, log hclog.Logger) *runner.SessionSandboxes {
	o := runner.SessionOptions{Config: cfg.Sessions, Checkpoints: checkpoints, MinFree: cfg.Audit.MinFree}
	switch {
	case checkpoints != "":
		// The daemon's, beside its checkpoints in its state dir.
		o.Dir = filepath.Join(filepath.Dir(checkpoints), "session-sandboxes")
	case pins != nil:
		// Any other process (skillbox mcp) keeps its sandboxes' skills
		// in a dir of its pid beside the snapshots, removed when it ends
		// (and by a later one's sweep, should it die).
		o.Dir = filepath.Join(filepath.Dir(pins.Dir), "session-sandboxes", fmt.Sprintf("%s%d", runner.SessionDirPIDPrefix, os.Getpid()))
	}
	if sb, ok := rt.(runtime.SessionBackend); ok {
		o.Backend = sb
	}
	if exe, err := os.Executable(); err == nil {
		o.Supervisor = exe
	}
	return runner.NewSessionSandboxes(o, rec, log)
}
