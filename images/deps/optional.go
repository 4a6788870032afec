package deps

import (
	"context"
	"errors"
	"slices"
)

// Image extras (a recipe's python_extras: what hosted interpreters ship and
// Debian lacks) join a skill's layer, since a run mounts one layer. They
// are optional: an index that mirrors only approved packages must not fail
// every skill's layer because it lacks python-pptx. BuildOptional is the
// one rule for that.

// LeftOut is an optional requirement a build went without, and why.
// NoWheel: the source has no wheel of it (true of every layer on the
// image); otherwise the layer failed with the optional ones in for another
// reason (one of their own dependencies, a conflict) and built without.
type LeftOut struct {
	Name    string
	Why     string
	NoWheel bool
}

// BuildOptional builds req with optional added to its set (those req's set
// names itself are not added). An optional requirement the source has no
// wheel of is left out and the build tried again; a build that fails with
// optional ones in for another reason is tried once more without any.
// What the source has no wheel of is remembered in the store for
// UnservedTTL and not asked for again meanwhile (Store.Unserved). An
// error is the failure of req's own set, which is never dropped; left then
// keeps only the NoWheel entries, which hold whatever req needs. A layer of
// optional requirements alone that are all left out is nil, nil. attempt,
// when set, sees every build tried with what was left out of it so far
// (the audit's deps.build records).
func (b *Builder) BuildOptional(ctx context.Context, req Request, optional []Requirement, attempt func(try Request, left []LeftOut, l *Layer, err error)) (l *Layer, left []LeftOut, err error) {
	own := func(name string) bool {
		return req.Set != nil && slices.ContainsFunc(req.Set.Python, func(r Requirement) bool { return r.Name == name })
	}
	src := b.Sources.ID()
	unserved := b.Store.Unserved(req.ImageDigest, src)
	var opt []Requirement
	for _, r := range optional {
		if why, ok := unserved[r.Name]; ok && !own(r.Name) {
			left = append(left, LeftOut{Name: r.Name, Why: why, NoWheel: true})
			continue
		}
		if !own(r.Name) {
			opt = append(opt, r)
		}
	}
	for {
		try := req
		set := Set{}
		if req.Set != nil {
			set = *req.Set
		}
		// In the order the run's plan adds them, so both key one layer.
		set.Python = append(slices.Clone(set.Python), opt...)
		try.Set = &set
		if set.Empty() {
			return nil, left, nil
		}
		l, err := b.Build(ctx, try)
		if attempt != nil {
			attempt(try, left, l, err)
		}
		if err == nil || len(opt) == 0 || ctx.Err() != nil {
			if err != nil {
				left = slices.DeleteFunc(left, func(o LeftOut) bool { return !o.NoWheel })
			}
			return l, left, err
		}
		var nw *NoWheelError
		switch {
		case errors.As(err, &nw) && own(nw.Package):
			return nil, left, err
		case errors.As(err, &nw) && slices.ContainsFunc(opt, func(r Requirement) bool { return r.Name == nw.Package }):
			opt = slices.DeleteFunc(opt, func(r Requirement) bool { return r.Name == nw.Package })
			why := "the configured python_index has no wheel of it"
			left = append(left, LeftOut{Name: nw.Package, Why: why, NoWheel: true})
			if err := b.Store.MarkUnserved(req.ImageDigest, src, nw.Package, why); err != nil {
				b.logger().Warn("could not remember a missing wheel", "package", nw.Package, "error", err)
			}
		default:
			for _, r := range opt {
				left = append(left, LeftOut{Name: r.Name, Why: "the layer failed to build with it: " + tail(err.Error(), 300)})
			}
			opt = nil
		}
	}
}
