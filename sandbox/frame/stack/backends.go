package stack

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/containerd"
)

// RuntimeOptions say which sandbox runtime OpenRuntime makes: the command
// line's overrides of the config.
type RuntimeOptions struct {
	// Name overrides daemon.runtime.
	Name string
	// ContainerdAddress and ContainerdNamespace override runtime
	// "containerd" { address, namespace } (only containerd has them).
	ContainerdAddress   string
	ContainerdNamespace string
	// Logger is the runtime's logger; nil: the backend's default.
	Logger hclog.Logger
}

// runtimeOptions resolves o against cfg: the runtime's name and the
// options it is made with.
func runtimeOptions(cfg *policy.Config, o RuntimeOptions) (string, runtime.Options) {
	name := cfg.Daemon.Runtime
	if o.Name != "" {
		name = o.Name
	}
	ropts := cfg.RuntimeOptions(name)
	if name == containerd.Name {
		if o.ContainerdAddress != "" {
			ropts.Settings["address"] = o.ContainerdAddress
		}
		if o.ContainerdNamespace != "" {
			ropts.Settings["namespace"] = o.ContainerdNamespace
		}
	}
	if o.Logger != nil {
		ropts.Logger = o.Logger
	}
	return name, ropts
}

// OpenRuntime makes the sandbox runtime cfg and o name, for a command that
// asks it something (its version) or builds with it outside an engine.
func OpenRuntime(cfg *policy.Config, o RuntimeOptions) (runtime.Runtime, error) {
	name, ropts := runtimeOptions(cfg, o)
	return runtime.New(name, ropts)
}

// OpenContainerd makes the containerd backend of cfg's runtime
// "containerd" block (o.Name is ignored), for the commands that import
// and pull images into its namespace.
func OpenContainerd(cfg *policy.Config, o RuntimeOptions) (*containerd.Containerd, error) {
	o.Name = containerd.Name
	_, ropts := runtimeOptions(cfg, o)
	return containerd.New(ropts)
}

// depsBuilder builds dependency layers in a sandbox of rt, keeping them
// beside the images in dir, from cfg's sources.
func depsBuilder(cfg *policy.Config, rt runtime.Runtime, dir string, log hclog.Logger) *deps.Builder {
	src := cfg.Sources
	return &deps.Builder{
		Store:   deps.OpenStore(dir),
		Runtime: rt,
		Sources: deps.Sources{PythonIndex: src.PythonIndex, FindLinks: src.FindLinks, NpmRegistry: src.NpmRegistry},
		Logger:  log.Named("deps"),
		// Bounds the layer's size and the daemon's memory during its build.
		MaxLayerBytes: cfg.Deps.MaxLayerBytes,
	}
}

// BuildImageExtras installs recipe r's python_extras on img, unpacked at
// rootfs, as a dependency layer beside the images in dir: the same safe
// path as a skill's (wheels only, offline install, hashes recorded), in a
// sandbox of cfg's daemon.runtime. The extras are optional: those the
// sources lack are left out and returned. A nil layer with nothing left
// out means the image has them already.
func BuildImageExtras(ctx context.Context, cfg *policy.Config, dir string, r *images.Recipe, img *images.Image, rootfs string, log hclog.Logger) (*deps.Layer, []deps.LeftOut, error) {
	set := &deps.Set{}
	for _, e := range r.PythonExtras {
		req, err := deps.ParseRequirement(e, r.Name+" python_extras")
		if err != nil {
			return nil, nil, err
		}
		set.Python = append(set.Python, req)
	}
	rt, err := OpenRuntime(cfg, RuntimeOptions{Logger: log.Named("runtime")})
	if err != nil {
		return nil, nil, err
	}
	l, left, err := depsBuilder(cfg, rt, dir, log).BuildOptional(ctx, deps.Request{Image: r.Name, ImageDigest: img.Digest, RootFS: rootfs, Set: &deps.Set{}}, set.Python, nil)
	if err != nil {
		return nil, left, fmt.Errorf("%s extras: %w", r.Name, err)
	}
	return l, left, nil
}
