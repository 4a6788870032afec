// Package runner is skillbox's run engine: it turns a run request that the
// service has already authorized into one sandboxed run. It plans the run
// (script path, interpreter image, limits, network and egress, the digest an
// approval binds), supplies its image, dependency layer and pinned skill
// copy, takes a warm sandbox when the pool has one, writes the run's audit
// records and calls the runtime. It knows nothing of sessions, callers or
// confirmations: those are the service's, which sits above it.
//
// A run never builds: the dependency layer a run needs is found by its key,
// waited for while a build is in flight (within the run's own timeout), or
// refused as unavailable with the command that builds it (layers). The warm
// pool is filled when a skill is loaded (WarmSkills) and drained when a
// skill's digest changes (DrainStale); a run whose sandbox-wide limits or
// network differ from the pool's goes cold, never into a looser sandbox.
//
// A skill whose policy says isolation = "session" runs in its session's own
// sandbox (package sessionbox), one per image and sandbox-wide limits,
// booted by the session's first such run and destroyed with it; background
// runs live in it until they exit, and it is paused, resumed and forked
// through runtime/checkpoint. Everything before the sandbox (policy,
// confirmation, audit start) and after it (audit end, write-back, result) is
// the same code as any run's.
package runner

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner/layers"
	"github.com/skillbox/skillbox/sandbox/core/runner/sessionbox"
)

// maxScriptBytes caps how much of a script is read on the host (to hash it
// and to sniff a shebang); a larger script is refused rather than half-hashed.
const maxScriptBytes = 4 << 20

// ImageSource is layers.ImageSource: what runs' images and dependency
// layers are unpacked from.
type ImageSource = layers.ImageSource

// Options are what an Engine is made of; New copies them, and the caller
// owns the parts' lifetimes.
type Options struct {
	Config  *policy.Config
	Images  ImageSource
	Runtime runtime.Runtime
	// Pool, when set, keeps pre-booted sandboxes of loaded skills (see
	// warm.go); it is made over Runtime.
	Pool *runtime.Pool
	// Pins gives each run a copy of the skill version it was checked
	// against; required (a run never mounts the live skill directory).
	Pins SkillPinner
	// Audit is the audit log's one writer (see audit.Journal); nil: no audit.
	Audit  audit.Recorder
	Logger hclog.Logger
	// Progress receives image build progress (stderr for the CLI).
	Progress io.Writer
	// Egress configures runs that policy gives egress destinations.
	Egress EgressOptions
	// Deps gives runs their dependency layers; nil: skills' declared
	// dependencies are ignored.
	Deps *layers.Deps
	// Sessions keeps the session sandboxes of isolation = "session" runs;
	// nil: such runs are refused, saying why.
	Sessions *sessionbox.Sandboxes
}

// Engine turns an authorized run request into one sandboxed run: it
// confines the script path, picks the interpreter image from the extension,
// applies the policy's limits and network rule, writes the audit
// start/end records, and calls the runtime. Every front end runs through
// it (behind the service's authorization), so all behave the same.
type Engine struct {
	cfg      *policy.Config
	images   ImageSource
	rt       runtime.Runtime
	pool     *runtime.Pool
	pins     SkillPinner
	journal  audit.Recorder
	log      hclog.Logger
	progress io.Writer
	egress   EgressOptions
	deps     *layers.Deps
	sessions *sessionbox.Sandboxes

	caMu           sync.Mutex // guards egress.CA
	egressBudgets  uidBudgets // per-uid budgets of egress audit records
	verMu          sync.Mutex // runs call version concurrently
	runtimeVersion string
}

// New makes an Engine of o.
func New(o Options) *Engine {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	j := o.Audit
	if j == nil {
		j = audit.NewJournal(nil, nil)
	}
	return &Engine{cfg: o.Config, images: o.Images, rt: o.Runtime, pool: o.Pool, pins: o.Pins, journal: j,
		log: log, progress: o.Progress, egress: o.Egress, deps: o.Deps, sessions: o.Sessions}
}

// Config is the policy the engine plans runs with.
func (e *Engine) Config() *policy.Config { return e.cfg }

// Runtime is the backend runs go to.
func (e *Engine) Runtime() runtime.Runtime { return e.rt }

// Pool is the warm pool, or nil.
func (e *Engine) Pool() *runtime.Pool { return e.pool }

// Pins is the skill snapshot store runs mount their skills from.
func (e *Engine) Pins() SkillPinner { return e.pins }

// Deps is the dependency layers of runs, or nil.
func (e *Engine) Deps() *layers.Deps { return e.deps }

// QuoteAll quotes each of ss as Go would (%q): how digests and approvers
// see argument lists.
func QuoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// SHA256Hex is the hex sha256 of b, as audit records and digests name
// contents.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// newID returns prefix + 128 random bits in hex.
func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}

// runFailure is a run's failure as the engine returns it: of the kind it
// has (a backend's sentinels carry theirs), or else the sandbox failing.
func runFailure(err error) error {
	if errkind.Of(err) == errkind.Internal {
		return errkind.Errorf(errkind.Internal, "sandbox failed: %w", err)
	}
	return err
}

// TeeSink writes to both sinks (either may be nil).
func TeeSink(a, b runtime.StreamSink) runtime.StreamSink {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return StreamFunc(func(p []byte) (int, error) {
		a.Write(p)
		return b.Write(p)
	})
}

// StreamFunc is a function as a runtime.StreamSink.
type StreamFunc func(p []byte) (int, error)

func (f StreamFunc) Write(p []byte) (int, error) { return f(p) }

// ErrRunCancelled is the cause of a run's ctx when runs.cancel stopped it.
var ErrRunCancelled = errors.New("run cancelled on request")
