package layers

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/skills"
)

// loadBuild is the build of a skill's layers a load started; done is
// closed when it has ended, err is then its error.
type loadBuild struct {
	done chan struct{}
	err  error
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
