package runtime

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/span"
)

// The warm pool keeps pre-booted single-use sandboxes per PoolKey, so that a
// run finds its interpreter already started and only pays for the job. A
// sandbox is given exactly one job and then destroyed; nothing of one run
// can reach the next. An empty pool never blocks a run: it goes cold (and
// its result says warm: false). Sandboxes are booted one at a time in the
// background at a low CPU weight, within per-key, total and memory bounds,
// and idle ones are destroyed after a time-out, when their key is drained
// (the skill changed) and on Close.

// PoolConfig bounds the pool. PerKey 0 turns it off.
type PoolConfig struct {
	PerKey       int           // idle sandboxes kept per key
	Total        int           // sandboxes (idle and booting) over all keys
	IdleTimeout  time.Duration // an idle sandbox older than this is destroyed
	MemoryBudget int64         // PSS of all idle sandboxes together; 0: none
}

// DefaultPoolConfig is the pool of a daemon whose config does not say.
var DefaultPoolConfig = PoolConfig{PerKey: 2, Total: 8, IdleTimeout: 10 * time.Minute, MemoryBudget: 256 << 20}

// PoolKey says which sandboxes are interchangeable: same backend, image,
// skill version, dependency layer, sandbox-wide limits and boot mode.
type PoolKey struct {
	Skill       string // the skill's name
	Image       ImageRef
	RootFS      string
	SkillDigest string
	SkillDir    string        // the pinned copy of that skill version
	DepLayer    string        // host dir of the dependency layer mounted at DepsMount; "" for none
	Limits      SandboxLimits // of the policy's limits for the skill
	Boot        BootMode
}

// KeyFor returns the pool key a job would use, and whether it can run warm
// at all (no network; python scripts in the supervisor, anything else
// exec'd).
func KeyFor(job Job, skill, skillDigest string) (PoolKey, bool) {
	boot := BootExec
	if PythonInvocation(job.Invocation.Args) {
		boot = BootPython
	}
	k := PoolKey{Skill: skill, Image: job.Sandbox.Image, RootFS: job.Sandbox.RootFS, SkillDigest: skillDigest, SkillDir: job.Sandbox.SkillDir,
		DepLayer: job.Sandbox.DepsDir, Limits: job.Sandbox.Limits.Sandbox(), Boot: boot}
	return k, !job.Sandbox.Network && job.Sandbox.Egress == nil
}

// SkillAtClaim is a Lifecycle whose sandboxes of some specs take their
// skill's files when claimed rather than when made (BindSkill): their
// pool keys name no skill, so one set of warm sandboxes per image serves
// every skill, and a changed skill runs its new bytes on a sandbox that
// was already warm.
type SkillAtClaim interface {
	SkillAtClaim(spec SandboxSpec) bool
}

// SkillBinder is a sandbox of a SkillAtClaim spec: BindSkill gives it
// the skill directory its job is delivered with, before Deliver.
type SkillBinder interface {
	BindSkill(ctx context.Context, dir string) error
}

// spec is the sandbox a pooled one of k is made as.
func (k PoolKey) spec(id string) SandboxSpec {
	return SandboxSpec{ID: id, RootFS: k.RootFS, Image: k.Image, SkillDir: k.SkillDir, DepsDir: k.DepLayer, Limits: k.Limits.Limits(), Boot: k.Boot, Background: true}
}

// generic returns the key the pool keeps sandboxes of key under: with
// no skill, when the backend binds skills at claim; key itself otherwise.
func (p *Pool) generic(key PoolKey) (PoolKey, bool) {
	sac, ok := p.lc.(SkillAtClaim)
	if !ok || !sac.SkillAtClaim(key.spec("")) {
		return key, false
	}
	key.Skill, key.SkillDigest, key.SkillDir = "", "", ""
	return key, true
}

type pooled struct {
	sb   Sandbox
	born time.Time
	pss  int64
}

// PoolStats is a snapshot of the pool.
type PoolStats struct {
	Keys      int   `json:"keys"`
	Idle      int   `json:"idle"`
	Booting   int   `json:"booting"`
	IdlePSS   int64 `json:"idle_pss_bytes"`
	Warm      int64 `json:"warm_runs"`
	Cold      int64 `json:"cold_runs"`
	BootFails int64 `json:"boot_failures"`
}

// Pool is the warm pool of one backend.
type Pool struct {
	lc  Lifecycle
	cfg PoolConfig
	log Logger

	mu       sync.Mutex
	idle     map[PoolKey][]*pooled
	wanted   map[PoolKey]time.Time // keys kept warm, and when last wanted
	failed   map[PoolKey]time.Time // last boot failure per key
	booting  int
	mem      int64
	pssGuess map[PoolKey]int64
	stats    PoolStats
	closed   bool

	kick chan struct{}
	stop chan struct{}
	bg   sync.WaitGroup // the refill loop and background destroys
}

// bootRetry is how long a key whose sandbox failed to boot is left cold.
const bootRetry = 30 * time.Second

// defaultPSSGuess is what a sandbox is assumed to cost before one of its
// key has been measured.
const defaultPSSGuess = 32 << 20

// NewPool starts a pool over lc. With cfg.PerKey 0 it never boots anything
// and every run goes cold.
func NewPool(lc Lifecycle, cfg PoolConfig, log Logger) *Pool {
	p := &Pool{
		lc: lc, cfg: cfg, log: NamedLogger(log, "pool"),
		idle: map[PoolKey][]*pooled{}, wanted: map[PoolKey]time.Time{}, failed: map[PoolKey]time.Time{},
		pssGuess: map[PoolKey]int64{},
		kick:     make(chan struct{}, 1), stop: make(chan struct{}),
	}
	if cfg.PerKey > 0 {
		p.bg.Add(1)
		go p.loop()
	}
	return p
}

// Warm asks for sandboxes of key to be kept ready (in the background).
func (p *Pool) Warm(key PoolKey) {
	if p.cfg.PerKey <= 0 {
		return
	}
	key, _ = p.generic(key)
	p.mu.Lock()
	if !p.closed {
		p.wanted[key] = time.Now()
	}
	p.mu.Unlock()
	p.poke()
}

func (p *Pool) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// take removes an idle sandbox of key from the pool, or returns nil.
func (p *Pool) take(key PoolKey) *pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	if len(list) == 0 {
		return nil
	}
	pb := list[0]
	p.idle[key] = list[1:]
	if len(p.idle[key]) == 0 {
		delete(p.idle, key)
	}
	p.mem -= pb.pss
	p.wanted[key] = time.Now()
	return pb
}

// Run runs job in a pre-booted sandbox of key if one is ready, and cold
// otherwise; it never waits for a sandbox to boot. Result.Warm says which.
func (p *Pool) Run(ctx context.Context, key PoolKey, job Job) (*Result, error) {
	var pb *pooled
	key, bind := p.generic(key)
	// Pooled sandboxes mount one skill and no program: run_code jobs run cold.
	if key.Limits == job.Sandbox.Limits.Sandbox() && !job.Sandbox.Network && job.Sandbox.Egress == nil && len(job.Sandbox.Skills) == 0 && job.Sandbox.Program == nil {
		cctx, sp := span.Start(ctx, "pool.claim")
		pb = p.take(key)
		if pb != nil && bind && job.Sandbox.SkillDir != "" {
			if err := bindSkill(cctx, pb.sb, job.Sandbox.SkillDir); err != nil {
				// The sandbox has had nothing of the job: the
				// run goes cold, as without one.
				p.log.Warn("binding a skill to a warm sandbox failed; the run goes cold", "id", pb.sb.ID(), "error", err)
				p.destroyLater(pb.sb)
				pb = nil
			}
		}
		sp.SetAttributes(span.AttrWarm.Bool(pb != nil))
		sp.End()
	}
	if pb == nil {
		p.mu.Lock()
		p.stats.Cold++
		p.mu.Unlock()
		return RunLifecycle(ctx, p.lc, job)
	}
	p.mu.Lock()
	p.stats.Warm++
	p.mu.Unlock()
	p.poke() // refill
	sb := pb.sb
	res, err := DeliverAndWait(ctx, sb, job.Invocation)
	// The result does not wait for the teardown; Close does.
	p.destroyLater(sb)
	return res, err
}

// bindSkill gives sb, a sandbox of a SkillAtClaim key, the skill dir.
func bindSkill(ctx context.Context, sb Sandbox, dir string) error {
	b, ok := sb.(SkillBinder)
	if !ok {
		return fmt.Errorf("sandbox %s takes no skill at claim (%T is no SkillBinder)", sb.ID(), sb)
	}
	return b.BindSkill(ctx, dir)
}

func (p *Pool) destroyLater(sb Sandbox) {
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		if err := sb.Destroy(context.Background()); err != nil {
			p.log.Warn("destroying a used sandbox failed", "id", sb.ID(), "error", err)
		}
	}()
}

// Drain destroys the idle sandboxes of every key match selects and stops
// keeping those keys warm (e.g. a skill whose files changed).
func (p *Pool) Drain(match func(PoolKey) bool) {
	p.mu.Lock()
	var gone []*pooled
	for k, list := range p.idle {
		if match(k) {
			gone = append(gone, list...)
			delete(p.idle, k)
		}
	}
	for k := range p.wanted {
		if match(k) {
			delete(p.wanted, k)
		}
	}
	for _, pb := range gone {
		p.mem -= pb.pss
	}
	p.mu.Unlock()
	for _, pb := range gone {
		p.log.Debug("draining sandbox", "id", pb.sb.ID())
		p.destroyLater(pb.sb)
	}
}

// Stats returns counts of the pool.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Keys = len(p.wanted)
	s.Booting = p.booting
	s.IdlePSS = p.mem
	for _, l := range p.idle {
		s.Idle += len(l)
	}
	return s
}

// IdleSandboxes lists the ids and host pids of the idle sandboxes (for
// memory measurements).
func (p *Pool) IdleSandboxes() map[string][]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]int{}
	for _, l := range p.idle {
		for _, pb := range l {
			out[pb.sb.ID()] = processesOf(pb.sb)
		}
	}
	return out
}

// Close stops refilling, destroys every idle sandbox and waits for the
// teardowns under way.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	p.Drain(func(PoolKey) bool { return true })
	done := make(chan struct{})
	go func() { p.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pool: sandboxes still being destroyed: %w", ctx.Err())
	}
}

// loop boots sandboxes for wanted keys one at a time and expires idle ones.
func (p *Pool) loop() {
	defer p.bg.Done()
	tick := time.NewTicker(max(time.Second, min(p.cfg.IdleTimeout/4, 30*time.Second)))
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		case <-tick.C:
		}
		p.expire()
		for {
			key, ok := p.next()
			if !ok {
				break
			}
			p.boot(key)
			select {
			case <-p.stop:
				return
			default:
			}
		}
	}
}

// expire destroys idle sandboxes past the idle time-out and forgets keys
// nobody asked for in that time.
func (p *Pool) expire() {
	if p.cfg.IdleTimeout <= 0 {
		return
	}
	now := time.Now()
	var gone []*pooled
	p.mu.Lock()
	for k, list := range p.idle {
		keep := list[:0]
		for _, pb := range list {
			if now.Sub(pb.born) > p.cfg.IdleTimeout {
				gone = append(gone, pb)
				p.mem -= pb.pss
			} else {
				keep = append(keep, pb)
			}
		}
		if len(keep) == 0 {
			delete(p.idle, k)
		} else {
			p.idle[k] = keep
		}
	}
	for k, at := range p.wanted {
		if now.Sub(at) > p.cfg.IdleTimeout {
			delete(p.wanted, k)
		}
	}
	p.mu.Unlock()
	for _, pb := range gone {
		p.destroyLater(pb.sb)
	}
}

// next picks a wanted key short of sandboxes, if the bounds allow a boot.
func (p *Pool) next() (PoolKey, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return PoolKey{}, false
	}
	total := p.booting
	for _, l := range p.idle {
		total += len(l)
	}
	if p.cfg.Total > 0 && total >= p.cfg.Total {
		return PoolKey{}, false
	}
	var best PoolKey
	found := false
	bestN := p.cfg.PerKey
	for k := range p.wanted {
		if at, ok := p.failed[k]; ok && time.Since(at) < bootRetry {
			continue
		}
		n := len(p.idle[k])
		if n >= bestN {
			continue
		}
		guess := p.pssGuess[k]
		if guess == 0 {
			guess = defaultPSSGuess
		}
		if p.cfg.MemoryBudget > 0 && p.mem+guess > p.cfg.MemoryBudget {
			continue
		}
		best, bestN, found = k, n, true
	}
	if found {
		p.booting++
	}
	return best, found
}

// boot makes one sandbox of key and adds it to the idle list.
func (p *Pool) boot(key PoolKey) {
	ctx, cancel := context.WithTimeout(context.Background(), BootTimeout+10*time.Second)
	defer cancel()
	id := IDPrefix + "warm-" + randomID()
	started := time.Now()
	sb, err := p.lc.Create(ctx, key.spec(id))
	if err == nil {
		if err = sb.Start(ctx); err != nil {
			_ = sb.Destroy(ctx)
		}
	}
	p.mu.Lock()
	p.booting--
	if err != nil {
		p.failed[key] = time.Now()
		p.stats.BootFails++
		p.mu.Unlock()
		p.log.Warn("booting a warm sandbox failed; runs of its skill go cold for a while", "id", id, "boot", key.Boot, "error", err)
		return
	}
	p.mu.Unlock()
	pss := PSS(processesOf(sb))
	p.mu.Lock()
	defer p.mu.Unlock()
	_, still := p.wanted[key]
	if p.closed || !still {
		p.destroyLater(sb)
		return
	}
	delete(p.failed, key)
	p.pssGuess[key] = pss
	p.mem += pss
	p.idle[key] = append(p.idle[key], &pooled{sb: sb, born: time.Now(), pss: pss})
	p.log.Debug("warm sandbox ready", "id", id, "boot", key.Boot, "took", time.Since(started), "pss", pss)
}

func randomID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// processesOf returns the host pids of a sandbox, when its backend says.
func processesOf(sb Sandbox) []int {
	if ps, ok := sb.(interface{ Processes() []int }); ok {
		return ps.Processes()
	}
	return nil
}

// PSS sums the proportional set size of processes (from
// /proc/<pid>/smaps_rollup); processes that are gone count nothing.
// Processes on one address space count once: each one's smaps_rollup is
// the whole address space's (gVisor's systrap stubs come as such pairs).
// Where that cannot be told (kcmp refused), they count each.
func PSS(pids []int) int64 {
	var total int64
	var counted []int
	for _, pid := range pids {
		if slices.ContainsFunc(counted, func(c int) bool { return sameAddressSpace(c, pid) }) {
			continue
		}
		v, ok := pssOf(pid)
		if !ok {
			continue
		}
		counted = append(counted, pid)
		total += v
	}
	return total
}

// kcmpVM is KCMP_VM of linux/kcmp.h.
const kcmpVM = 1

func sameAddressSpace(a, b int) bool {
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(a), uintptr(b), kcmpVM, 0, 0, 0)
	return errno == 0 && r == 0
}

func pssOf(pid int) (int64, bool) {
	v, err := ProcBytes("/proc/"+strconv.Itoa(pid)+"/smaps_rollup", "Pss")
	return v, err == nil
}

// ProcBytes reads the "FIELD: N kB" line of a /proc file (status,
// smaps_rollup) as bytes.
func ProcBytes(path, field string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s line", path, field)
}
