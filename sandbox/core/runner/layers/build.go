package layers

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/skills"
)

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
	part, notes := deps.Unused(d.Image(rootfs).Missing(part), imp, src)
	return part, notes, nil
}

// EventBuild is the audit event of a dependency layer build.
const EventBuild = "deps.build"

// auditBuild records how a layer build for sk ended (nothing when no layer
// was needed).
func (d *Deps) auditBuild(ctx context.Context, sk *skills.Skill, req *deps.Request, l *deps.Layer, err error, left map[string]string) {
	if d.journal == nil || (l == nil && err == nil) {
		return
	}
	r := &audit.Record{Event: EventBuild, Skill: &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}, Outcome: audit.OutcomeOK,
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
