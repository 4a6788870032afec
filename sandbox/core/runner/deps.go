package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
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

// loadBuild is the build of a skill's layers a load started; done is
// closed when it has ended, err is then its error.
type loadBuild struct {
	done chan struct{}
	err  error
}

// DepsOptions are what Deps is made of.
type DepsOptions struct {
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

// NewDeps makes the dependency layers of runs.
func NewDeps(o DepsOptions) *Deps {
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

func (d *Deps) image(rootfs string) *deps.Image {
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

// ForRun returns the layer a run of plan p in image img mounts (nil when
// it needs none) and notes for the run's result and audit (what was left
// out of the layer). A layer not built yet is waited for when a build is
// in progress and the config says wait, never longer than the run's own
// timeout; a build that fails ends the wait at once with its error.
func (d *Deps) ForRun(ctx context.Context, p *Plan, img runtime.ImageRef, rootfs string) (*deps.Layer, []string, error) {
	if d == nil {
		return nil, nil, nil
	}
	if p.code == nil {
		return d.layerFor(ctx, p.request.Skill, p.skillRoot, img, rootfs, p.limits.Timeout)
	}
	// A code run mounts one layer: that of the one mounted skill that
	// needs one.
	var layer *deps.Layer
	var owner string
	var notes []string
	for _, m := range p.code.Mounts {
		l, n, err := d.layerFor(ctx, m.Skill, m.Root, img, rootfs, p.limits.Timeout)
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
	plan := &deps.Plan{Image: d.image(rootfs)}
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

// Build builds (or finds) the layers skill sk needs, one per image family
// its declarations use; it blocks. Images are the config's images for .py
// and .js scripts.
func (d *Deps) Build(ctx context.Context, sk *skills.Skill, root string) ([]*deps.Layer, error) {
	set, err := d.Declared(sk, root)
	if err != nil || set.Empty() && !d.hasExtras() {
		return nil, err
	}
	var out []*deps.Layer
	for _, probe := range d.probes(set) {
		interp, err := d.cfg.Interpreter(probe, nil)
		if err != nil {
			return out, errkind.Wrap(errkind.InvalidParams, err)
		}
		img, rootfs, err := d.images.Ensure(ctx, interp.Image, nil)
		if err != nil {
			return out, errkind.Errorf(errkind.Unavailable, "image %q: %w", interp.Image, err)
		}
		req, _, err := d.request(sk, root, set, img, rootfs)
		if err != nil {
			return out, err
		}
		if req == nil {
			continue
		}
		if err := layerImage(sk, img, rootfs); err != nil {
			return out, err
		}
		l, err := d.buildLayer(ctx, sk, root, set, img, rootfs)
		if err != nil {
			return out, err
		}
		if l != nil {
			out = append(out, l)
		}
	}
	return out, nil
}

// buildLayer builds the layer of sk on img: the skill's own part, which
// fails as it always did, and the image extras, which are optional
// (deps.Builder.BuildOptional). What it leaves out is remembered, so that
// runs plan the layer it built: an extra the source has no wheel of for
// every layer on the image (in the store), extras a layer failed with for
// that layer (here).
func (d *Deps) buildLayer(ctx context.Context, sk *skills.Skill, root string, set *deps.Set, img runtime.ImageRef, rootfs string) (*deps.Layer, error) {
	part, _, err := d.partOf(sk, root, set, img, rootfs)
	if err != nil {
		return nil, err
	}
	ex, known := d.extrasFor(img, part)
	base := deps.Request{Image: img.Name, ImageDigest: img.Digest, RootFS: rootfs, Set: part, Skill: sk.Name, SkillDigest: sk.Digest}
	if base.Set == nil {
		base.Set = &deps.Set{}
	}
	l, left, err := d.builder.BuildOptional(ctx, base, ex, func(try deps.Request, left []deps.LeftOut, l *deps.Layer, err error) {
		out := maps.Clone(known)
		for _, o := range left {
			if out == nil {
				out = map[string]string{}
			}
			out[o.Name] = o.Why
		}
		d.auditBuild(ctx, sk, &try, l, err, out)
	})
	for _, o := range left {
		if o.NoWheel { // the store remembers it
			d.logger().Warn("image extra left out: the package source has no wheel of it", "image", img.Name, "extra", o.Name)
			continue
		}
		d.logger().Warn("image extra left out: the layer failed with it", "image", img.Name, "skill", sk.Name, "extra", o.Name, "why", o.Why)
		d.mu.Lock()
		if d.apart == nil {
			d.apart = map[string]string{}
		}
		d.apart[extrasKey(img, part)] = o.Why
		d.mu.Unlock()
	}
	if err != nil {
		// Runs plan what request says now: the failure is theirs to report.
		if req, _, rerr := d.request(sk, root, set, img, rootfs); rerr == nil && req != nil {
			if p := deps.PlanFor(*req); p.Digest != "" {
				d.mu.Lock()
				if d.errs == nil {
					d.errs = map[string]error{}
				}
				d.errs[p.Digest] = err
				d.mu.Unlock()
			}
		}
		return nil, err
	}
	return l, nil
}

// partOf is the skill's own part of a layer on img (without the image
// extras): what set declares for the image's family, less the packages no
// script imports whose ecosystem has no source (deps.Unused; notes name
// them).
func (d *Deps) partOf(sk *skills.Skill, root string, set *deps.Set, img runtime.ImageRef, rootfs string) (*deps.Set, []string, error) {
	part := forFamily(set, family(img.Name))
	src := d.builder.Sources
	if part == nil || rootfs == "" || src.Python() && src.NpmRegistry != "" {
		return part, nil, nil
	}
	imp, err := d.importsOf(sk, root)
	if err != nil {
		return nil, nil, err
	}
	part, notes := deps.Unused(d.image(rootfs).Missing(part), imp, src)
	return part, notes, nil
}

// EventDepsBuild is the audit event of a dependency layer build.
const EventDepsBuild = "deps.build"

// auditBuild records how a layer build for sk ended (nothing when no layer
// was needed).
func (d *Deps) auditBuild(ctx context.Context, sk *skills.Skill, req *deps.Request, l *deps.Layer, err error, left map[string]string) {
	if d.journal == nil || (l == nil && err == nil) {
		return
	}
	r := &audit.Record{Event: EventDepsBuild, Skill: &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}, Outcome: audit.OutcomeOK,
		Detail: map[string]string{"image": req.Image}}
	if p := deps.PlanFor(*req); p.Digest != "" {
		r.Detail["layer"] = p.Digest
	}
	switch {
	case err != nil:
		r.Outcome, r.Error = audit.OutcomeError, audit.ClipText(err.Error(), 2048)
		if errors.Is(err, deps.ErrTooLarge) || errors.Is(err, deps.ErrRefused) || errors.Is(err, deps.ErrHash) {
			r.Outcome = audit.OutcomeRefused
		}
	default:
		r.Detail["size"] = strconv.FormatInt(l.Size, 10)
	}
	if len(left) > 0 {
		var out []string
		for e, why := range left {
			out = append(out, e+" ("+why+")")
		}
		slices.Sort(out)
		r.Detail["extras_left_out"] = audit.ClipText(strings.Join(out, "; "), 2048)
	}
	_ = d.journal.Record(ctx, r) // logged there; the build's own error is what the caller sees
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

// OnLoad starts building sk's layers in the background (when the config
// allows) and reports what the skill declares for the receipt.
// ready, when set, is called once the layers are built.
func (d *Deps) OnLoad(sk *skills.Skill, ready func()) *api.Dependencies {
	if d == nil {
		return nil
	}
	set, err := d.Declared(sk, sk.Dir)
	if err != nil {
		return &api.Dependencies{State: "invalid", Message: err.Error()}
	}
	if set.Empty() {
		if d.hasExtras() && d.cfg.Deps.BuildOnLoad {
			go d.buildInBackground(sk, ready, d.startLoading(sk)) // the image extras' layer
		}
		return nil
	}
	info := describe(set)
	if !d.cfg.Deps.BuildOnLoad {
		info.State = "not_built"
		info.Message = "build_on_load is off: run skillbox deps build " + sk.Name
		return info
	}
	info.State = "building"
	go d.buildInBackground(sk, ready, d.startLoading(sk))
	return info
}

// startLoading records that a load started sk's build; the returned func
// says it ended, with its error (a second load while one builds shares
// its record).
func (d *Deps) startLoading(sk *skills.Skill) func(error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.loading == nil {
		d.loading = map[string]*loadBuild{}
	}
	b := d.loading[sk.Digest]
	if b == nil {
		b = &loadBuild{done: make(chan struct{})}
		d.loading[sk.Digest] = b
	}
	return func(err error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.loading[sk.Digest] == b {
			delete(d.loading, sk.Digest)
			b.err = err
			close(b.done)
		}
	}
}

// loadOf is the build a load of sk started, nil when none is under way.
func (d *Deps) loadOf(sk *skills.Skill) *loadBuild {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loading[sk.Digest]
}

// buildInBackground builds sk's layers; done is startLoading's, called
// (before ready) when the build has ended.
func (d *Deps) buildInBackground(sk *skills.Skill, ready func(), done func(error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var ls []*deps.Layer
	err := errors.New("the build stopped unexpectedly")
	defer func() { done(err) }() // a panic still ends the waits
	ls, err = d.Build(ctx, sk, sk.Dir)
	done(err)
	log := d.logger()
	if err != nil {
		log.Warn("dependency layer build failed", "skill", sk.Name, "error", err)
		return
	}
	for _, l := range ls {
		log.Info("dependency layer ready", "skill", sk.Name, "layer", l.Digest)
	}
	if ready != nil {
		ready()
	}
}

func (d *Deps) logger() hclog.Logger {
	if d.log == nil {
		return hclog.NewNullLogger()
	}
	return d.log
}

func describe(set *deps.Set) *api.Dependencies {
	info := &api.Dependencies{Files: set.Files}
	for _, r := range set.Python {
		info.Python = append(info.Python, r.Line())
	}
	for _, n := range set.Npm {
		info.Npm = append(info.Npm, n.Name+"@"+n.Range)
	}
	return info
}

// depsModuleEnv adds the layer to the module path of a run in image.
func depsModuleEnv(moduleEnv []string, image string, l *deps.Layer) []string {
	if l == nil {
		return moduleEnv
	}
	return runtime.WithDepsPath(moduleEnv, family(image))
}

var (
	pyMissingRE   = regexp.MustCompile(`ModuleNotFoundError: No module named '([A-Za-z0-9_.]+)'`)
	nodeMissingRE = regexp.MustCompile(`Cannot find (?:module|package) '([^'./][^']*)'`)
)

// importHint recognises a failed import in a run's stderr and says how to
// provide the module.
func (d *Deps) importHint(o *Finished) string {
	r := &o.Result
	if r.ExitCode == 0 {
		return ""
	}
	if m := pyMissingRE.FindSubmatch(r.Stderr); m != nil {
		mod, _, _ := strings.Cut(string(m[1]), ".")
		if extra := d.extraFor(o.Image.Name, mod); extra != "" {
			return fmt.Sprintf("module %q is the image extra %q of image %q, which is not installed: configure python_index { url = … } and run: skillbox images build %s", mod, extra, o.Image.Name, o.Image.Name)
		}
		return fmt.Sprintf("module %q is neither in image %q nor in the skill's dependency layer: declare its package in the skill's requirements.txt or a PEP 723 block (# /// script … dependencies = [...]) and configure python_index; skillbox skills check %s lists every missing import",
			mod, o.Image.Name, o.Plan.SkillName())
	}
	if m := nodeMissingRE.FindSubmatch(r.Stderr); m != nil {
		return fmt.Sprintf("module %q is neither in image %q nor in the skill's dependency layer: declare it in the skill's package.json and configure npm_registry", string(m[1]), o.Image.Name)
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

// CheckSkill is the engine's half of skills.check.
func (e *Engine) CheckSkill(ctx context.Context, sk *skills.Skill) (*api.CheckSkillResult, error) {
	in := deps.CheckInput{Images: map[string]*deps.Image{}, Layers: map[string]string{}, Extras: map[string][]string{}}
	res := &api.CheckSkillResult{Skill: sk.Name, Digest: sk.Digest, Findings: []api.CheckFinding{}}
	var set *deps.Set
	if e.deps != nil {
		var err error
		if set, err = e.deps.Declared(sk, sk.Dir); err != nil {
			return nil, err
		}
		in.Declared = set
	}
	why := map[string]string{}
	for _, fam := range []struct{ family, probe string }{{"python", "x.py"}, {"node", "x.js"}, {"shell", "x.sh"}} {
		interp, err := e.cfg.Interpreter(fam.probe, nil)
		if err != nil {
			why[fam.family] = err.Error()
			continue
		}
		if ic, ok := e.images.(BuiltChecker); ok && ic.Built(interp.Image) != nil {
			why[fam.family] = fmt.Sprintf("image %q is not built (skillbox images build %s)", interp.Image, interp.Image)
			continue
		}
		ref, rootfs, err := e.images.Ensure(ctx, interp.Image, nil)
		if err != nil {
			why[fam.family] = fmt.Sprintf("image %q: %v", interp.Image, err)
			continue
		}
		if rootfs == "" {
			why[fam.family] = fmt.Sprintf("image %q is the registry image %s: dependency layers are built only on images skillbox builds", interp.Image, ref.Ref)
			continue
		}
		if e.deps != nil {
			in.Images[fam.family] = e.deps.image(rootfs)
			in.Layers[fam.family], _ = e.deps.ReadyDir(sk, sk.Dir, ref, rootfs)
			in.Extras[fam.family] = e.deps.extras[interp.Image]
		} else {
			in.Images[fam.family] = deps.Inspect(rootfs)
		}
	}
	in.ImageFor = e.checkImageFor()
	found, unchecked, err := deps.Check(sk.Dir, in)
	if err != nil {
		return nil, errkind.Errorf(errkind.Internal, "checking skill %q: %w", sk.Name, err)
	}
	for _, f := range unchecked {
		res.Skipped = append(res.Skipped, f+" scripts: "+why[f])
	}
	for _, f := range found {
		res.Findings = append(res.Findings, api.CheckFinding(f))
		if f.State == deps.StateMissing {
			res.Missing++
		}
	}
	return res, nil
}
