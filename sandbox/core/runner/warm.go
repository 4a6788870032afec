package runner

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/span"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/skills"
)

// The warm path: with a pool (Engine.Pool), loading a skill into a session
// boots sandboxes for the interpreters its scripts need, a run takes one if
// it is ready (and goes cold if not), and a skill whose digest changed has
// its sandboxes drained, so the next run mounts the new version.

// warmImagesPerSkill bounds how many interpreter images one skill warms.
const warmImagesPerSkill = 3

// warmScanFiles bounds the files of scripts/ looked at to pick them.
const warmScanFiles = 500

// runJob runs job warm when the pool has a sandbox for it, cold otherwise.
// tracedRunJob is runJob in a span of its own ("sandbox.run": the sandbox
// boot or pool claim, delivery, the script and its outputs), which says
// whether the run was warm, why it ended and its exit code.
// The string names the session sandbox the run went to, if it did.
func (e *Engine) tracedRunJob(ctx context.Context, p *Plan, img runtime.ImageRef, job runtime.Job) (*runtime.Result, string, error) {
	ctx, sp := span.Start(ctx, "sandbox.run", span.AttrRuntime.String(e.rt.Name()))
	if p.isolation == policy.IsolationSession {
		res, box, err := e.sessions.run(ctx, p, job)
		endRunSpan(sp, res, err)
		return res, box, err
	}
	res, err := e.runJob(ctx, p, img, job)
	endRunSpan(sp, res, err)
	return res, "", err
}

// endRunSpan ends a sandbox.run span with what the run came to.
func endRunSpan(sp trace.Span, res *runtime.Result, err error) {
	if res != nil && sp.IsRecording() {
		sp.SetAttributes(span.AttrWarm.Bool(res.Warm), span.AttrReason.String(string(res.Reason)), span.AttrExitCode.Int(res.ExitCode))
	}
	span.End(sp, err, api.KindOf(err))
}

// runJob runs a fresh-sandbox run (not a session's).
func (e *Engine) runJob(ctx context.Context, p *Plan, img runtime.ImageRef, job runtime.Job) (*runtime.Result, error) {
	sk := p.request.Skill
	if e.pool == nil || sk == nil { // run_code runs are always cold
		return e.rt.Run(ctx, job)
	}
	key, ok := runtime.KeyFor(job, sk.Name, sk.Digest)
	if !ok {
		return e.rt.Run(ctx, job)
	}
	// A run of an older version than the pool holds, or the other way
	// round: the pool's sandboxes of other versions go.
	e.pool.Drain(func(k runtime.PoolKey) bool { return k.Skill == sk.Name && k.SkillDigest != sk.Digest })
	return e.pool.Run(ctx, key, job)
}

// WarmSkills starts booting sandboxes for the skills' scripts, in the
// background; it never blocks the caller and never builds an image.
func (e *Engine) WarmSkills(list []*skills.Skill) {
	if e == nil || e.pool == nil || len(list) == 0 {
		return
	}
	list = slices.Clone(list)
	go func() {
		for _, sk := range list {
			e.warmSkill(sk)
		}
	}()
}

func (e *Engine) warmSkill(sk *skills.Skill) {
	log := e.log
	e.pool.Drain(func(k runtime.PoolKey) bool { return k.Skill == sk.Name && k.SkillDigest != sk.Digest })
	root, err := e.pins.Pin(sk)
	if err != nil {
		log.Debug("not warming a skill that cannot be pinned", "skill", sk.Name, "error", err)
		return
	}
	pol := e.cfg.For(sk.Name)
	limits, dirs := pol.Limits.Value, pol.ScriptDirs.Value
	for _, it := range e.scriptImages(root, dirs) {
		if ic, ok := e.images.(BuiltChecker); ok && ic.Built(it.image) != nil {
			continue // warming never builds an image
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		ref, rootfs, err := e.images.Ensure(ctx, it.image, nil)
		cancel()
		if err != nil {
			log.Debug("not warming: image unavailable", "skill", sk.Name, "image", it.image, "error", err)
			continue
		}
		layer, ok := e.deps.ReadyDir(sk, root, ref, rootfs)
		if !ok {
			continue // warmed once its layer is built (Deps.OnLoad)
		}
		boot := runtime.BootExec
		if runtime.PythonInvocation(append(slices.Clone(it.argv), "/x")) {
			boot = runtime.BootPython
		}
		e.pool.Warm(runtime.PoolKey{Skill: sk.Name, Image: ref, RootFS: rootfs, SkillDigest: sk.Digest,
			SkillDir: root, DepLayer: layer, Limits: limits.Sandbox(), Boot: boot})
	}
}

type scriptImage struct {
	image string
	argv  []string
}

// scriptImages are the interpreter images of the files the pinned skill
// may run (under dirs, the policy's script_dirs, or anywhere when nil),
// most used first. An image appears once per way of booting it: a shell
// script moved to the python image (interpreterFor) boots it differently
// from the python scripts that run there.
func (e *Engine) scriptImages(root string, dirs []string) []scriptImage {
	count := map[string]int{}
	argv := map[string][]string{}
	image := map[string]string{}
	seen := 0
	if dirs == nil {
		dirs = []string{"."}
	}
	walk := func(p string, d fs.DirEntry, err error) error {
		if err != nil || seen >= warmScanFiles {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		seen++
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil
		}
		head := make([]byte, 256)
		if f, err := os.Open(p); err == nil {
			n, _ := f.Read(head)
			head = head[:n]
			f.Close()
		}
		in, err := e.cfg.Interpreter(filepath.ToSlash(rel), head)
		if err != nil {
			return nil
		}
		if len(in.Argv) > 0 && shellInterpreters[path.Base(in.Argv[0])] {
			// A shell script's image also depends on the programs it
			// starts (interpreterFor): warm the one its runs will use.
			if b, err := readFileMax(p, maxScriptBytes); err == nil {
				if in, err = e.interpreterFor(filepath.ToSlash(rel), b); err != nil {
					return nil
				}
			}
		}
		k := fmt.Sprintf("%s\x00%v", in.Image, runtime.PythonInvocation(append(slices.Clone(in.Argv), "/x")))
		count[k]++
		argv[k], image[k] = in.Argv, in.Image
		return nil
	}
	for _, d := range dirs {
		_ = filepath.WalkDir(filepath.Join(root, filepath.FromSlash(d)), walk)
	}
	var keys []string
	for k := range count {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := count[b] - count[a]; c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var out []scriptImage
	for _, k := range keys {
		out = append(out, scriptImage{image: image[k], argv: argv[k]})
	}
	if len(out) > warmImagesPerSkill {
		out = out[:warmImagesPerSkill]
	}
	return out
}

// DrainStale drains the pool's sandboxes of skill versions that are no
// longer current (the registry reloaded a changed skill, or lost it).
func (e *Engine) DrainStale(get func(name string) (*skills.Skill, error)) {
	if e.pool == nil {
		return
	}
	e.pool.Drain(func(k runtime.PoolKey) bool {
		sk, err := get(k.Skill)
		return err != nil || sk.Digest != k.SkillDigest
	})
}
