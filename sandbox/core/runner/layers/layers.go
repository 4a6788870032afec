// Package layers is the dependency layers of runs: what a skill declares
// (requirements.txt, PEP 723 blocks, package.json), found once per skill
// digest; the build of its layer, started when the skill is loaded and
// never inside a run; and, for a run, the built layer, or the build under
// way waited for within the run's own timeout, or a refusal naming the
// command that builds it.
package layers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/skills"
)

// Deps gives runs their dependency layers. It discovers what a skill
// declares once per skill digest, starts a layer's build when the skill is
// loaded (never inside a run) and, for a run, finds the built layer or waits
// for the build in progress, as the config's dependencies block says.
// A skill that declares nothing costs one map lookup per run.
type Deps struct {
	builder *deps.Builder
	cfg     *policy.Config
	images  ImageSource
	log     hclog.Logger
	journal audit.Recorder
	extras  map[string][]string

	mu       sync.Mutex
	declared map[string]*deps.Set     // by skill digest
	imports  map[string]*deps.Imports // by skill digest
	inspect  map[string]*deps.Image
	errs     map[string]error // last build failure by layer digest
	// loading holds, by skill digest, the build a load started: a run
	// right after the load waits for it even before the build has
	// registered itself, and learns its error the moment it fails.
	loading map[string]*loadBuild
	// apart are the layers (by extrasKey) that failed with the image
	// extras and built without them (→ why): built without them since.
	apart map[string]string
}

// ImageSource yields a ready, unpacked rootfs for an image name, building the
// image first when allowed. It is an interface so a warm pool or a containerd
// snapshotter can supply rootfs differently later.
type ImageSource interface {
	Ensure(ctx context.Context, name string, progress io.Writer) (runtime.ImageRef, string, error)
}

// Options are what Deps is made of.
type Options struct {
	Builder *deps.Builder
	Config  *policy.Config
	Images  ImageSource
	Logger  hclog.Logger
	// Audit, when set, gets a deps.build record for every layer build
	// (its outcome, or why it failed: a layer over its cap, a refused
	// package).
	Audit audit.Recorder
	// Extras are the packages each image's recipe names as extras (image
	// name → package names), for hints about what is missing.
	Extras map[string][]string
}

// New makes the dependency layers of runs.
func New(o Options) *Deps {
	return &Deps{builder: o.Builder, cfg: o.Config, images: o.Images, log: o.Logger, journal: o.Audit, extras: o.Extras}
}

// Builder builds and stores the layers.
func (d *Deps) Builder() *deps.Builder { return d.builder }

// family is the interpreter family of an image name ("python-slim" → "python").
func family(image string) string {
	f, _, _ := strings.Cut(image, "-")
	return f
}

// Declared returns what skill sk (its files under root) declares plus what
// the config adds, cached by the skill's digest.
func (d *Deps) Declared(sk *skills.Skill, root string) (*deps.Set, error) {
	d.mu.Lock()
	if s, ok := d.declared[sk.Digest]; ok && sk.Digest != "" {
		d.mu.Unlock()
		return s, nil
	}
	d.mu.Unlock()
	pk := d.cfg.For(sk.Name).Packages
	s, err := deps.Discover(root, deps.Extra{Python: pk.Python, Npm: pk.Npm, AllowSource: pk.BuildFromSource, Where: pk.Where})
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidParams, "skill %q: %w", sk.Name, err)
	}
	d.mu.Lock()
	if d.declared == nil {
		d.declared = map[string]*deps.Set{}
	}
	d.declared[sk.Digest] = s
	d.mu.Unlock()
	return s, nil
}

// importsOf is what the scripts of skill sk (its files under root)
// import, cached by the skill's digest.
func (d *Deps) importsOf(sk *skills.Skill, root string) (*deps.Imports, error) {
	d.mu.Lock()
	if imp, ok := d.imports[sk.Digest]; ok && sk.Digest != "" {
		d.mu.Unlock()
		return imp, nil
	}
	d.mu.Unlock()
	imp, err := deps.ScanImports(root)
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidParams, "skill %q: reading its scripts' imports: %w", sk.Name, err)
	}
	d.mu.Lock()
	if d.imports == nil {
		d.imports = map[string]*deps.Imports{}
	}
	d.imports[sk.Digest] = imp
	d.mu.Unlock()
	return imp, nil
}

// forFamily is the part of s an image of family uses.
func forFamily(s *deps.Set, fam string) *deps.Set {
	out := *s
	switch fam {
	case "python":
		out.Npm, out.NpmLock, out.NpmLockSHA256 = nil, nil, ""
	case "node":
		out.Python = nil
	default:
		return nil
	}
	if out.Empty() {
		return nil
	}
	return &out
}

// Image is what the image unpacked at rootfs has installed, inspected once.
func (d *Deps) Image(rootfs string) *deps.Image {
	d.mu.Lock()
	defer d.mu.Unlock()
	if im, ok := d.inspect[rootfs]; ok {
		return im
	}
	im := deps.Inspect(rootfs)
	if d.inspect == nil {
		d.inspect = map[string]*deps.Image{}
	}
	d.inspect[rootfs] = im
	return im
}

// layerImage refuses a dependency layer on an image without a rootfs on
// the host (a registry image, which only containerd holds): layers are
// built on images skillbox builds.
func layerImage(sk *skills.Skill, img runtime.ImageRef, rootfs string) error {
	if rootfs != "" {
		return nil
	}
	return errkind.Errorf(errkind.Unavailable, "skill %q declares dependencies, and its scripts run in image %q, the registry image %s: dependency layers are built only on images skillbox builds (map the extension to a recipe image, or use a registry image that already has the packages and drop the declaration)", sk.Name, img.Name, img.Ref)
}

// request is the build request of the part of set that image img uses
// (nil when none), and notes on what it leaves out: declared packages no
// script imports whose ecosystem has no source (deps.Unused), and image
// extras the source cannot provide that a script imports.
func (d *Deps) request(sk *skills.Skill, root string, set *deps.Set, img runtime.ImageRef, rootfs string) (*deps.Request, []string, error) {
	part, notes, err := d.partOf(sk, root, set, img, rootfs)
	if err != nil {
		return nil, nil, err
	}
	ex, left := d.extrasFor(img, part)
	if len(left) > 0 {
		n, err := d.extrasNote(sk, root, img.Name, left)
		if err != nil {
			return nil, nil, err
		}
		notes = append(notes, n...)
	}
	if len(ex) > 0 {
		if part == nil {
			part = &deps.Set{}
		} else {
			cp := *part
			part = &cp
		}
		part.Python = append(slices.Clone(part.Python), ex...)
	}
	if part == nil {
		return nil, notes, nil
	}
	return &deps.Request{Image: img.Name, ImageDigest: img.Digest, RootFS: rootfs, Set: part, Skill: sk.Name, SkillDigest: sk.Digest}, notes, nil
}

// extrasNote names the left-out extras (extra → why) a script of sk
// imports: the others concern no run of it.
func (d *Deps) extrasNote(sk *skills.Skill, root, image string, left map[string]string) ([]string, error) {
	imp, err := d.importsOf(sk, root)
	if err != nil {
		return nil, err
	}
	var notes []string
	for _, e := range d.extras[image] {
		why, ok := left[e]
		r, err := deps.ParseRequirement(e, "image "+image+" python_extras")
		if ok && err == nil && imp.ImportsPython(r.Name) {
			notes = append(notes, fmt.Sprintf("image %q's extra %s is not in the dependency layer (%s): a script that imports %s fails; add a wheel of it to the configured python_index", image, e, why, deps.ModuleOf(r.Name)))
		}
	}
	return notes, nil
}

// hasExtras reports whether some image's extras can be installed (they
// have a source); without, skills that declare nothing skip all of this.
func (d *Deps) hasExtras() bool {
	if !d.builder.Sources.Python() {
		return false
	}
	for _, ex := range d.extras {
		if len(ex) > 0 {
			return true
		}
	}
	return false
}

// extrasFor are the image extras of img that go into a layer with part
// (what a skill declares for it): none without a Python source, none that
// part names itself (the skill's own declaration wins), and none the
// source cannot provide: left says which were left out and why (recipe
// extra → why).
func (d *Deps) extrasFor(img runtime.ImageRef, part *deps.Set) (ex []deps.Requirement, left map[string]string) {
	if !d.builder.Sources.Python() || family(img.Name) != "python" {
		return nil, nil
	}
	// What the source has no wheel of is left out of every layer on the
	// image (the store remembers it for a while: deps.UnservedTTL).
	noWheel := d.builder.Store.Unserved(img.Digest, d.builder.Sources.ID())
	d.mu.Lock()
	apart, isApart := d.apart[extrasKey(img, part)]
	d.mu.Unlock()
	for _, e := range d.extras[img.Name] {
		r, err := deps.ParseRequirement(e, "image "+img.Name+" python_extras")
		if err != nil {
			continue // recipes are validated when loaded
		}
		if part != nil && slices.ContainsFunc(part.Python, func(x deps.Requirement) bool { return x.Name == r.Name }) {
			continue
		}
		why, ok := noWheel[r.Name]
		if !ok && isApart {
			why, ok = apart, true
		}
		if ok {
			if left == nil {
				left = map[string]string{}
			}
			left[e] = why
			continue
		}
		ex = append(ex, r)
	}
	return ex, left
}

// extrasKey names a layer's own part (what a skill needs of image img,
// without the extras) for the record of layers built apart from them.
func extrasKey(img runtime.ImageRef, part *deps.Set) string {
	if part == nil {
		part = &deps.Set{}
	}
	return deps.Key(img.Digest, part)
}

// Mount is a skill a run mounts: its copy at Root.
type Mount struct {
	Skill *skills.Skill
	Root  string
}

// ForSkill returns the layer a run of skill m in image img mounts (nil
// when it needs none) and notes for the run's result and audit (what was
// left out of the layer). A layer not built yet is waited for when a build
// is in progress and the config says wait, never longer than the run's own
// timeout; a build that fails ends the wait at once with its error.
func (d *Deps) ForSkill(ctx context.Context, m Mount, img runtime.ImageRef, rootfs string, timeout time.Duration) (*deps.Layer, []string, error) {
	if d == nil {
		return nil, nil, nil
	}
	return d.layerFor(ctx, m.Skill, m.Root, img, rootfs, timeout)
}

// ForCode is ForSkill for a code run, which mounts one layer: that of the
// one mounted skill that needs one.
func (d *Deps) ForCode(ctx context.Context, mounts []Mount, img runtime.ImageRef, rootfs string, timeout time.Duration) (*deps.Layer, []string, error) {
	if d == nil {
		return nil, nil, nil
	}
	var layer *deps.Layer
	var owner string
	var notes []string
	for _, m := range mounts {
		l, n, err := d.layerFor(ctx, m.Skill, m.Root, img, rootfs, timeout)
		if err != nil {
			return nil, nil, err
		}
		notes = append(notes, n...)
		if l == nil {
			continue
		}
		if layer != nil && l.Digest != layer.Digest {
			return nil, nil, errkind.Errorf(errkind.InvalidParams, "skills %q and %q each need a dependency layer and a code run mounts one: load only one of them for this code, or run their scripts with skills.run_script", owner, m.Skill.Name)
		}
		layer, owner = l, m.Skill.Name
	}
	return layer, notes, nil
}

// plan is what skill sk (its copy at root) needs beyond image img: nil
// when nothing; notes say what request left out.
func (d *Deps) plan(sk *skills.Skill, root string, img runtime.ImageRef, rootfs string) (*deps.Plan, []string, error) {
	set, err := d.Declared(sk, root)
	if err != nil || set.Empty() && !d.hasExtras() {
		return nil, nil, err
	}
	req, notes, err := d.request(sk, root, set, img, rootfs)
	if err != nil || req == nil {
		return nil, notes, err
	}
	if err := layerImage(sk, img, rootfs); err != nil {
		return nil, nil, err
	}
	plan := &deps.Plan{Image: d.Image(rootfs)}
	plan.Missing = plan.Image.Missing(req.Set)
	if plan.Missing == nil {
		return nil, notes, nil
	}
	plan.Digest = deps.Key(req.ImageDigest, plan.Missing)
	return plan, notes, nil
}

// ReadyDir is the directory of the built layer skill sk needs in img, ""
// when it needs none; ok is false when it needs one that is not built (or
// its declarations are invalid). It never waits (warming, checks).
func (d *Deps) ReadyDir(sk *skills.Skill, root string, img runtime.ImageRef, rootfs string) (dir string, ok bool) {
	if d == nil {
		return "", true
	}
	plan, _, err := d.plan(sk, root, img, rootfs)
	if err != nil {
		return "", false
	}
	if plan == nil {
		return "", true
	}
	if l, err := d.builder.Ready(plan); err == nil {
		return l.Dir, true
	}
	return "", false
}

// layerFor is the layer skill sk (its pinned copy at root) needs in image
// img, or nil, with the notes of its plan; a run with timeout waits for a
// build no longer than that.
func (d *Deps) layerFor(ctx context.Context, sk *skills.Skill, root string, img runtime.ImageRef, rootfs string, timeout time.Duration) (*deps.Layer, []string, error) {
	plan, notes, err := d.plan(sk, root, img, rootfs)
	if err != nil || plan == nil {
		return nil, notes, err
	}
	if l, err := d.builder.Ready(plan); err == nil {
		return l, notes, nil
	}
	if set, _ := d.Declared(sk, root); forFamily(set, family(img.Name)) == nil {
		// Only the image's extras: optional, never waited for or failed
		// on (skills check and the import hint name them when missing).
		return nil, notes, nil
	}
	name := sk.Name
	if d.cfg.Deps.WhenNotReady != "fail" {
		limit := d.cfg.Deps.WaitTimeout
		if timeout > 0 && (limit <= 0 || timeout < limit) {
			limit = timeout
		}
		w := layerWait{
			load: func() *loadBuild { return d.loadOf(sk) },
			ready: func() (*deps.Layer, []string, error) {
				// The build may have left extras out: plan again.
				p, n, err := d.plan(sk, root, img, rootfs)
				if err != nil || p == nil {
					return nil, n, err
				}
				plan = p
				l, err := d.builder.Ready(p)
				return l, n, err
			},
			flight: func(ctx context.Context) (*deps.Layer, bool, error) { return d.builder.Wait(ctx, plan.Digest) },
		}
		l, n, waited, err := w.wait(ctx, limit)
		switch {
		case err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return nil, nil, errkind.Errorf(errkind.Unavailable, "the dependency layer of skill %q is still building after %s (a run waits no longer than its timeout): run again once it is built (skillbox deps build %s builds it and shows why it fails)", name, limit, name)
		case err != nil:
			return nil, nil, errkind.Errorf(errkind.Unavailable, "the dependency layer of skill %q did not build: %w", name, err)
		case waited:
			return l, n, nil
		}
	}
	if err := deps.MissingSourceError(name, plan.Missing, d.builder.Sources); err != nil {
		return nil, nil, errkind.Wrap(errkind.Unavailable, err)
	}
	d.mu.Lock()
	berr := d.errs[plan.Digest]
	d.mu.Unlock()
	if berr != nil {
		return nil, nil, errkind.Errorf(errkind.Unavailable, "the dependency layer of skill %q failed to build: %v", name, berr)
	}
	return nil, nil, errkind.Wrap(errkind.Unavailable, errkind.Errorf(deps.ErrNotReady, "skill %q needs dependency layer %s, which is not built: load the skill (skills.load builds it) or run: skillbox deps build %s", name, plan.Digest, name))
}

// layerWait is how a run waits for a layer that is not built: for the
// build a load of its skill started (load), else for a build of the same
// layer in progress (flight). A build that ends with an error ends the
// wait at once with that error; ready looks for the layer again. Function
// fields, so that the rule is tested on its own.
type layerWait struct {
	load   func() *loadBuild
	ready  func() (*deps.Layer, []string, error)
	flight func(ctx context.Context) (l *deps.Layer, inflight bool, err error)
}

// wait waits at most limit. waited is false when there was nothing to
// wait for (the caller says why the layer is missing); err is the build's
// error, or the context's (context.DeadlineExceeded once limit is up).
func (w layerWait) wait(ctx context.Context, limit time.Duration) (l *deps.Layer, notes []string, waited bool, err error) {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	if b := w.load(); b != nil {
		select {
		case <-b.done:
		case <-ctx.Done():
			return nil, nil, true, ctx.Err()
		}
		// The load builds every family the skill declares for: this
		// run's layer may be there even when another failed.
		if l, notes, err := w.ready(); err == nil {
			return l, notes, true, nil
		}
		if b.err != nil {
			return nil, nil, true, b.err
		}
	}
	l, inflight, err := w.flight(ctx)
	if !inflight {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, true, err
	}
	return l, nil, true, nil
}

// probes are script names whose extensions pick the images set needs.
func (d *Deps) probes(set *deps.Set) []string {
	var out []string
	if len(set.Python) > 0 || d.hasExtras() {
		out = append(out, "x.py")
	}
	if len(set.Npm) > 0 {
		out = append(out, "x.js")
	}
	return out
}

// ModuleEnv adds the layer to the module path of a run in image.
func ModuleEnv(moduleEnv []string, image string, l *deps.Layer) []string {
	if l == nil {
		return moduleEnv
	}
	return runtime.WithDepsPath(moduleEnv, family(image))
}
