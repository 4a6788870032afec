package runner

import (
	"context"
	"fmt"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/skills"
)

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
			in.Images[fam.family] = e.deps.Image(rootfs)
			in.Layers[fam.family], _ = e.deps.ReadyDir(sk, sk.Dir, ref, rootfs)
			in.Extras[fam.family] = e.deps.Extras(interp.Image)
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
