// Package bench measures skillbox's performance goals through the same stack
// the commands build: cold runs through the engine, warm runs through a real
// daemon on a temporary socket, throughput, a bare sandbox, the registry and
// the audit chain. Every figure is reported next to a baseline taken in the
// same run (a native interpreter start, a cold runtime run), so results
// compare across machines as ratios. `skillbox bench` is its command;
// docs/BENCHMARKS.md holds the figures and how to reproduce them.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
	"github.com/skillbox/skillbox/skills"
)

// Options are the bench's parts and sizes; the command's flags fill them.
type Options struct {
	Runs              int      // runs per latency series
	Runtimes          []string // runtimes measured cold ("runsc", "runsc-debian", "runc", "containerd")
	ConfigFile        string   // HCL config for the runtimes' blocks; "": built-in defaults
	ContainerdAddress string   // over the config's containerd address
	Root              string   // skill root holding hello-python
	ImageDir          string   // image store; "": $SKILLBOX_IMAGES or the default store
	Skills            int      // skills indexed for the registry figures
	AuditRuns         int      // runs verified for the audit figure
	Concurrency       []int    // concurrent clients for the throughput figures
	Pool              int      // warm pool per skill in the daemon figures
	Only              []string // parts to run (cold, daemon, throughput, session, registry, audit, workspace, observability); none: all
	// WorkspaceFiles and WorkspaceBytes size the workspace of the
	// workspace figures.
	WorkspaceFiles int
	WorkspaceBytes int64
	Version        string // the binary's version, for the daemon.start record
	Logger         hclog.Logger
	// Report, when set, receives each figure as it is measured.
	Report func(Figure)
}

// Parts are the bench's parts, in the order they run.
var Parts = []string{"cold", "daemon", "throughput", "session", "registry", "audit", "workspace", "observability"}

// Run measures the parts o names and returns every figure measured, also
// those before an error.
func Run(ctx context.Context, o Options) ([]Figure, error) {
	b := &bench{ctx: ctx, o: o, log: o.Logger}
	if b.log == nil {
		b.log = hclog.NewNullLogger()
	}
	only := map[string]bool{}
	for _, p := range o.Only {
		if !slices.Contains(Parts, p) {
			return nil, fmt.Errorf("bench: unknown part %q (the parts: %s)", p, strings.Join(Parts, ", "))
		}
		only[p] = true
	}
	want := func(part string) bool { return len(only) == 0 || only[part] }

	native := 0.0
	if want("cold") || want("daemon") || want("session") {
		var err error
		if native, err = b.native(o.Runs); err != nil {
			return b.figures, err
		}
	}
	cold := map[string]float64{}
	if want("cold") || want("session") {
		for _, rt := range o.Runtimes {
			med, err := b.cold(ctx, rt, o.Runs, native)
			if err != nil {
				return b.figures, err
			}
			cold[rt] = med
		}
	}
	if want("daemon") {
		// The warm path of runsc, and of containerd when it is measured.
		for _, rt := range []string{"runsc", "containerd"} {
			if rt == "containerd" && !slices.Contains(o.Runtimes, rt) {
				continue
			}
			if err := b.daemon(ctx, rt, o.Runs, cold[rt], native); err != nil {
				return b.figures, err
			}
		}
	}
	if want("throughput") {
		coldRate := 0.0
		if cold["runsc"] > 0 {
			coldRate = 1000 / cold["runsc"]
		}
		if err := b.bareSandboxes(ctx, o.Runs, coldRate); err != nil {
			return b.figures, err
		}
		for _, conc := range o.Concurrency {
			if err := b.throughput(ctx, conc, o.Runs, coldRate); err != nil {
				return b.figures, err
			}
		}
	}
	if want("session") {
		if err := b.sessions(ctx, o.Runs, cold["runsc"], native); err != nil {
			return b.figures, err
		}
	}
	if want("registry") {
		if err := b.registry(ctx, o.Skills); err != nil {
			return b.figures, err
		}
	}
	if want("audit") {
		if err := b.audit(ctx, o.AuditRuns); err != nil {
			return b.figures, err
		}
	}
	if want("workspace") {
		if err := b.workspace(ctx, "runsc", o.Runs); err != nil {
			return b.figures, err
		}
	}
	if want("observability") {
		if err := b.observability(ctx, "runsc", o.Runs); err != nil {
			return b.figures, err
		}
	}
	return b.figures, nil
}

// Figure is one measured value with what it is compared against.
type Figure struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Baseline string  `json:"baseline,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	Note     string  `json:"note,omitempty"`
}

type bench struct {
	ctx     context.Context
	o       Options
	log     hclog.Logger
	figures []Figure
	// warm is the warm run_script p50 of runsc (ms), once measured.
	warm float64
}

// String is the figure as one line of the bench's table.
func (f Figure) String() string {
	line := fmt.Sprintf("%-44s %10.2f %-6s", f.Name, f.Value, f.Unit)
	if f.Baseline != "" {
		line += fmt.Sprintf("  %6.2fx %s", f.Ratio, f.Baseline)
	}
	if f.Note != "" {
		line += "  (" + f.Note + ")"
	}
	return line
}

func (b *bench) add(f Figure) {
	b.figures = append(b.figures, f)
	if b.o.Report != nil {
		b.o.Report(f)
	}
}

// native times a plain python3 start on the host: the floor any sandbox adds to.
func (b *bench) native(n int) (float64, error) {
	// Debian's interpreter is the one the python image ships; prefer it.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py, err = exec.LookPath("python3")
	}
	if _, err := os.Stat(py); err != nil {
		return 0, fmt.Errorf("bench needs python3 on the host for its baseline: apt-get install python3")
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		if out, err := exec.Command(py, "-c", `print("hello")`).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("native python3: %v: %s", err, out)
		}
		ds = append(ds, time.Since(t))
	}
	med := ms(median(ds))
	b.add(Figure{Name: "native python3 hello (median)", Value: med, Unit: "ms", Note: fmt.Sprintf("n=%d", n)})
	return med, nil
}

func (b *bench) engine(rt string, log hclog.Logger) (*runner.Engine, *skills.Skill, error) {
	cfg := policy.Default()
	if f := b.o.ConfigFile; f != "" {
		var err error
		if cfg, err = policy.Load(f); err != nil {
			return nil, nil, err
		}
	}
	if rt == "runsc-debian" {
		// Debian's gVisor, as a config naming its binary would run it.
		rt = "runsc"
		cfg.Runtimes["runsc"].Binary = "/usr/bin/runsc"
		cfg.Runtimes["runsc"].StateDir = runtime.RunscStateDir("/usr/bin/runsc")
	}
	st, err := stack.New(b.ctx, stack.Options{Mode: stack.EngineOnly, Config: cfg, Logger: log, Runtime: rt,
		ContainerdAddress: b.o.ContainerdAddress, ImageDir: b.o.ImageDir, Progress: os.Stderr})
	if err != nil {
		return nil, nil, err
	}
	eng := st.Engine()
	reg, err := stack.OpenRegistry(b.ctx, cfg, []string{b.o.Root}, log)
	if err != nil {
		return nil, nil, err
	}
	sk, err := reg.Get("hello-python")
	if err != nil {
		return nil, nil, fmt.Errorf("bench needs the sample skill hello-python under --root: %w", err)
	}
	return eng, sk, nil
}

// cold times one fresh sandbox per run, through the engine as `skillbox run` does.
func (b *bench) cold(ctx context.Context, rt string, n int, native float64) (float64, error) {
	eng, sk, err := b.engine(rt, b.log)
	if err != nil {
		return 0, err
	}
	// One untimed run builds/unpacks the image if needed.
	if _, err := eng.Run(ctx, runner.RunRequest{Skill: sk, Script: "scripts/hello.py"}); err != nil {
		return 0, fmt.Errorf("%s: %w", rt, err)
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		out, err := eng.Run(ctx, runner.RunRequest{Skill: sk, Script: "scripts/hello.py"})
		if err != nil {
			return 0, fmt.Errorf("%s: %w", rt, err)
		}
		if out.Result.ExitCode != 0 {
			return 0, fmt.Errorf("%s: hello.py exited %d: %s", rt, out.Result.ExitCode, out.Result.Stderr)
		}
		ds = append(ds, time.Since(t))
	}
	med := ms(median(ds))
	b.add(Figure{Name: fmt.Sprintf("cold run hello.py, %s (median)", rt), Value: med, Unit: "ms",
		Baseline: "native python3", Ratio: med / native, Note: fmt.Sprintf("n=%d, p90 %.0f ms", n, ms(pct(ds, 0.9)))})
	return med, nil
}

// imagesDir is the image store the daemon and bare-sandbox figures use:
// --images, else $SKILLBOX_IMAGES, else the default store.
func (b *bench) imagesDir() string {
	if d := b.o.ImageDir; d != "" {
		return d
	}
	if d := os.Getenv("SKILLBOX_IMAGES"); d != "" {
		return d
	}
	return images.DefaultDir
}

// daemonFixture starts the daemon in-process on a temp socket with the bench's
// skill root and no confirmation rules.
func (b *bench) daemonFixture(ctx context.Context, rt string) (*stack.Serving, string, func(), error) {
	return b.daemonFixtureWith(ctx, rt, nil)
}

// daemonFixtureWith is daemonFixture with change applied to the config.
func (b *bench) daemonFixtureWith(ctx context.Context, rt string, change func(*policy.Config)) (*stack.Serving, string, func(), error) {
	dir, err := os.MkdirTemp("", "skillbox-bench-")
	if err != nil {
		return nil, "", nil, err
	}
	root, _ := filepath.Abs(b.o.Root)
	imgDir := b.imagesDir()
	// The config as a value: the defaults with the bench's daemon, root,
	// images and pool laid over them.
	cfg := policy.Default()
	cfg.File = filepath.Join(dir, "bench.hcl")
	d := &cfg.Daemon
	d.Socket, d.StateDir, d.AuditDir = filepath.Join(dir, "s.sock"), filepath.Join(dir, "state"), filepath.Join(dir, "audit")
	d.MaxConcurrentRuns, d.Runtime = 16, rt
	cfg.Skills.Roots = []string{root}
	cfg.Skills.LockFile = filepath.Join(d.StateDir, "skills.lock")
	cfg.Images.Dir = imgDir
	n := max(1, b.o.Pool)
	cfg.Pool.PerKey, cfg.Pool.Total, cfg.Pool.MemoryBudget = n, n, 1<<30
	if rt == "containerd" {
		// The containerd the cold figures used: --config's block, the flag over it.
		rc := policy.Default().Runtimes["containerd"]
		if f := b.o.ConfigFile; f != "" {
			if lc, err := policy.Load(f); err == nil {
				rc = lc.Runtimes["containerd"]
			}
		}
		cc := cfg.Runtimes["containerd"]
		cc.Address, cc.Namespace, cc.Handler = rc.Address, rc.Namespace, rc.Handler
		if a := b.o.ContainerdAddress; a != "" {
			cc.Address = a
		}
		if rc.Binary != "" {
			cc.Binary = rc.Binary
		}
	}
	if change != nil {
		change(cfg)
	}
	rd, err := stack.StartDaemon(ctx, cfg, b.o.Version, hclog.NewNullLogger())
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	cleanup := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rd.Close(sctx, "bench done")
		os.RemoveAll(dir)
	}
	return rd, cfg.Daemon.Socket, cleanup, nil
}

// dialLoaded connects to the daemon and opens a session with hello-python
// loaded; the caller closes the client.
func dialLoaded(ctx context.Context, sock string) (*client.Client, string, error) {
	cl, err := client.Dial(ctx, sock)
	if err != nil {
		return nil, "", err
	}
	sid, err := loadedSession(ctx, cl)
	if err != nil {
		cl.Close()
		return nil, "", err
	}
	return cl, sid, nil
}

func loadedSession(ctx context.Context, cl *client.Client) (string, error) {
	var s api.CreateSessionResult
	if err := cl.Call(ctx, "sessions.create", struct{}{}, &s); err != nil {
		return "", err
	}
	var lr api.LoadResult
	if err := cl.Call(ctx, "skills.load", api.LoadParams{SessionID: s.SessionID, Names: []string{"hello-python"}}, &lr); err != nil {
		return "", err
	}
	return s.SessionID, nil
}

// waitIdle waits (untimed) until the daemon's pool holds n idle sandboxes.
func waitIdle(ctx context.Context, rd *stack.Serving, n int) error {
	p := rd.Stack().Engine().Pool()
	if p == nil {
		return fmt.Errorf("the daemon has no warm pool")
	}
	deadline := time.Now().Add(2 * time.Minute)
	for p.Stats().Idle < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool did not fill: %+v", p.Stats())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func runHello(ctx context.Context, cl *client.Client, sid string) (bool, error) {
	var r api.RunScriptResult
	if err := cl.Call(ctx, "skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/hello.py"}, &r); err != nil {
		return false, err
	}
	if r.ExitCode != 0 {
		return false, fmt.Errorf("hello.py exited %d: %s", r.ExitCode, r.Stderr)
	}
	return r.Warm, nil
}

// daemon times run_script end to end on the socket, warm: before each
// (timed) run it waits (untimed) for a pre-booted sandbox. It also reports
// the memory of an idle sandbox and of the daemon.
func (b *bench) daemon(ctx context.Context, rt string, n int, coldRunsc, native float64) error {
	rd, sock, cleanup, err := b.daemonFixture(ctx, rt)
	if err != nil {
		return err
	}
	defer cleanup()
	cl, sid, err := dialLoaded(ctx, sock)
	if err != nil {
		return err
	}
	defer cl.Close()
	var ds []time.Duration
	warm := 0
	for i := 0; i < n+1; i++ {
		if err := waitIdle(ctx, rd, 1); err != nil {
			return err
		}
		t := time.Now()
		w, err := runHello(ctx, cl, sid)
		if err != nil {
			return err
		}
		if i == 0 {
			continue // the first run also pins the skill
		}
		ds = append(ds, time.Since(t))
		if w {
			warm++
		}
	}
	med := ms(median(ds))
	note := fmt.Sprintf("n=%d, %d warm, p90 %.1f ms, p99 %.1f ms", n, warm, ms(pct(ds, 0.9)), ms(pct(ds, 0.99)))
	b.add(Figure{Name: "warm run_script hello.py, " + rt + " (p50)", Value: med, Unit: "ms", Baseline: "native python3", Ratio: med / native, Note: note + ", goal <= 3x"})
	if rt == "runsc" {
		b.warm = med
	}
	if coldRunsc > 0 {
		b.add(Figure{Name: "warm run_script hello.py, " + rt + " (p50)", Value: med, Unit: "ms", Baseline: "cold " + rt + " run", Ratio: med / coldRunsc, Note: "goal <= 0.2x"})
	}

	// Memory: a full pool at rest.
	if err := waitIdle(ctx, rd, max(1, b.o.Pool)); err != nil {
		return err
	}
	time.Sleep(time.Second)
	idle := rd.Stack().Engine().Pool().IdleSandboxes()
	var total int64
	for _, pids := range idle {
		total += runtime.PSS(pids)
	}
	if len(idle) > 0 {
		b.add(Figure{Name: "idle pre-booted sandbox PSS (python, " + rt + ")", Value: float64(total) / float64(len(idle)) / (1 << 20), Unit: "MiB",
			Note: fmt.Sprintf("mean of %d, goal <= 25 MiB", len(idle))})
	}
	if rss, err := rssOf(os.Getpid()); err == nil {
		b.add(Figure{Name: "daemon RSS (in-process, pool full)", Value: float64(rss) / (1 << 20), Unit: "MiB"})
	}
	return nil
}

// throughput runs conc clients at once, perClient runs each, through the
// daemon with its pool full at the start, and reports runs/s, latency
// percentiles, the share that ran warm and the host CPU per run.
func (b *bench) throughput(ctx context.Context, conc, perClient int, coldRate float64) error {
	rd, sock, cleanup, err := b.daemonFixture(ctx, "runsc")
	if err != nil {
		return err
	}
	defer cleanup()
	clients := make([]loadClient, conc)
	for i := range clients {
		cl, sid, err := dialLoaded(ctx, sock)
		if err != nil {
			return err
		}
		defer cl.Close()
		clients[i] = loadClient{cl, sid}
	}
	if err := waitIdle(ctx, rd, max(1, b.o.Pool)); err != nil {
		return err
	}
	l, err := runLoad(ctx, clients, perClient)
	if err != nil {
		return err
	}
	ds, warm, el, cpu := l.ds, l.warm, l.elapsed, l.cpu
	total := conc * perClient
	rate := float64(total) / el.Seconds()
	f := Figure{Name: fmt.Sprintf("throughput, %d clients, runsc", conc), Value: rate, Unit: "runs/s",
		Note: fmt.Sprintf("%d runs (%d warm) in %.1f s; p50 %.0f p90 %.0f p99 %.0f ms; host CPU %.0f ms/run",
			total, warm, el.Seconds(), ms(median(ds)), ms(pct(ds, 0.9)), ms(pct(ds, 0.99)), ms(cpu)/float64(total))}
	if coldRate > 0 {
		f.Baseline, f.Ratio = "sequential cold runsc runs/s", rate/coldRate
	}
	b.add(f)
	return nil
}

// loadClient is one client of a throughput figure: a connection and its
// session with hello-python loaded.
type loadClient struct {
	cl  *client.Client
	sid string
}

// load is what runLoad measured.
type load struct {
	ds      []time.Duration // each run's latency
	warm    int             // runs that said warm
	elapsed time.Duration
	cpu     time.Duration // host CPU meanwhile
}

// runLoad runs hello.py perClient times in each client at once.
func runLoad(ctx context.Context, clients []loadClient, perClient int) (load, error) {
	var mu sync.Mutex
	var l load
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	cpu0 := hostCPU()
	start := time.Now()
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perClient; i++ {
				t := time.Now()
				w, err := runHello(ctx, c.cl, c.sid)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				l.ds = append(l.ds, time.Since(t))
				if w {
					l.warm++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return l, err
	}
	l.elapsed, l.cpu = time.Since(start), hostCPU()-cpu0
	return l, nil
}

// bareSandboxes measures what one gVisor sandbox costs the host with
// nothing of skillbox's around it: n times `runsc run` of /bin/true on the
// python image (runsc's own default spec, read-only root, no network), each
// followed by `runsc delete`. Every run consumes a sandbox, so the host CPU
// per sandbox bounds the runs/s a machine can sustain whatever skillbox
// does; the figure reports that ceiling for this machine's cores.
func (b *bench) bareSandboxes(ctx context.Context, n int, coldRate float64) error {
	dir, err := os.MkdirTemp("", "skillbox-bench-bare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	imgDir := b.imagesDir()
	st, err := images.OpenStore(imgDir, b.log)
	if err != nil {
		return err
	}
	img, err := st.Get("python")
	if err != nil {
		return fmt.Errorf("bare sandboxes: %w", err)
	}
	root, err := st.RootFS(ctx, img)
	if err != nil {
		return err
	}
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o700); err != nil {
		return err
	}
	bin := runtime.PinnedRunscPath()
	run := func(wd string, args ...string) error {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = wd
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("bare sandboxes: runsc %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run(bundle, "spec", "--", "/bin/true"); err != nil {
		return err
	}
	cfgPath := filepath.Join(bundle, "config.json")
	var spec map[string]any
	raw, err := os.ReadFile(cfgPath)
	if err == nil {
		err = json.Unmarshal(raw, &spec)
	}
	if err != nil {
		return fmt.Errorf("bare sandboxes: runsc spec: %w", err)
	}
	spec["root"] = map[string]any{"path": root, "readonly": true}
	if p, ok := spec["process"].(map[string]any); ok {
		p["terminal"] = false
	}
	if raw, err = json.Marshal(spec); err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return err
	}
	global := []string{"--root", filepath.Join(dir, "state"), "--platform=" + runtime.PinnedRunscPlatform, "--network=none"}
	cpu0 := hostCPU()
	start := time.Now()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("skillbox-bench-bare-%d", i)
		if err := run(bundle, append(global, "run", "--bundle", bundle, id)...); err != nil {
			return err
		}
		if err := run(bundle, append(global, "delete", "--force", id)...); err != nil {
			return err
		}
	}
	per := (hostCPU() - cpu0) / time.Duration(n)
	wall := time.Since(start) / time.Duration(n)
	b.add(Figure{Name: "bare gVisor sandbox, host CPU (run+delete)", Value: ms(per), Unit: "ms",
		Note: fmt.Sprintf("n=%d, runsc run of /bin/true, nothing of skillbox's; wall %.0f ms", n, ms(wall))})
	if per > 0 {
		ceiling := float64(Cores()) * float64(time.Second) / float64(per)
		f := Figure{Name: fmt.Sprintf("sandboxes/s ceiling on %d cores", Cores()), Value: ceiling, Unit: "runs/s",
			Note: "every run consumes a sandbox: no single-use run rate can exceed this"}
		if coldRate > 0 {
			f.Baseline, f.Ratio = "sequential cold runsc runs/s", ceiling/coldRate
		}
		b.add(f)
	}
	return nil
}

// hostCPU is the CPU time all processes of the host used so far (user,
// nice, system, irq, softirq from /proc/stat).
func hostCPU() time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i > 6 {
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// registry indexes generated skills and reports time and memory.
func (b *bench) registry(ctx context.Context, n int) error {
	dir, err := os.MkdirTemp("", "skillbox-bench-skills-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("bench-skill-%05d", i)
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(d, "scripts"), 0o755); err != nil {
			return err
		}
		md := fmt.Sprintf("---\nname: %s\ndescription: Generated skill number %d for measuring the registry; it converts and summarises example documents.\n---\n# %s\n\nRun scripts/run.py.\n", name, i, name)
		if err := os.WriteFile(filepath.Join(d, "SKILL.md"), []byte(md), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "scripts", "run.py"), []byte("print('hi')\n"), 0o644); err != nil {
			return err
		}
	}
	before, _ := rssOf(os.Getpid())
	t := time.Now()
	reg, err := skills.NewRegistry(skills.RegistryOptions{Roots: []string{dir}, MaxDepth: 2, MaxSkills: n + 1, AllowExtensions: true, Logger: hclog.NewNullLogger()})
	if err != nil {
		return err
	}
	if err := reg.Reload(ctx); err != nil {
		return err
	}
	first := time.Since(t)
	after, _ := rssOf(os.Getpid())
	if got := len(reg.List()); got != n {
		return fmt.Errorf("registry indexed %d of %d generated skills", got, n)
	}
	t = time.Now()
	if err := reg.Reload(ctx); err != nil {
		return err
	}
	again := time.Since(t)
	b.add(Figure{Name: fmt.Sprintf("registry: index %d skills (cold)", n), Value: ms(first), Unit: "ms"})
	b.add(Figure{Name: fmt.Sprintf("registry: reload %d unchanged skills", n), Value: ms(again), Unit: "ms", Baseline: "cold index", Ratio: float64(again) / float64(first)})
	b.add(Figure{Name: fmt.Sprintf("RSS growth with %d skills indexed", n), Value: float64(after-before) / (1 << 20), Unit: "MiB", Note: fmt.Sprintf("process RSS %.0f MiB", float64(after)/(1<<20))})
	return nil
}

// audit writes n run start/end record pairs and verifies the chain.
func (b *bench) audit(ctx context.Context, n int) error {
	dir, err := os.MkdirTemp("", "skillbox-bench-audit-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	acfg := &policy.Config{}
	acfg.Daemon.AuditDir = dir
	l, err := stack.OpenAudit(acfg, hclog.NewNullLogger())
	if err != nil {
		return err
	}
	code := 0
	t := time.Now()
	for i := 0; i < n; i++ {
		run := &audit.RunInfo{RunID: fmt.Sprintf("run_%032d", i), Script: "scripts/hello.py", ScriptSHA256: strings.Repeat("ab", 32),
			Args: []string{"a", "b"}, Runtime: "runsc", Image: "python", ImageDigest: "sha256:" + strings.Repeat("cd", 32),
			Limits: runtime.DefaultLimits}
		for _, ev := range []string{audit.EventRunStart, audit.EventRunEnd} {
			r := &audit.Record{Event: ev, SessionID: "ses_bench", Skill: &audit.SkillRef{Name: "hello-python", Digest: "sha256:" + strings.Repeat("ef", 32)}, Run: run}
			if ev == audit.EventRunEnd {
				run.ExitCode = &code
				run.Reason = "exit"
			}
			if err := l.Append(ctx, r); err != nil {
				return err
			}
		}
	}
	appendDur := time.Since(t)
	if err := l.Close(); err != nil {
		return err
	}
	t = time.Now()
	rep, err := audit.Verify(dir, audit.VerifyOptions{})
	if err != nil {
		return err
	}
	verifyDur := time.Since(t)
	b.add(Figure{Name: fmt.Sprintf("audit: append %d records (fsync each)", 2*n), Value: ms(appendDur) / float64(2*n), Unit: "ms/rec"})
	b.add(Figure{Name: fmt.Sprintf("audit: verify %d runs (%d records)", n, rep.Records), Value: verifyDur.Seconds(), Unit: "s",
		Note: fmt.Sprintf("%.0f records/s", float64(rep.Records)/verifyDur.Seconds())})
	return nil
}

func median(ds []time.Duration) time.Duration { return pct(ds, 0.5) }

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rssOf reads VmRSS of a process, in bytes.
func rssOf(pid int) (int64, error) {
	return runtime.ProcBytes(fmt.Sprintf("/proc/%d/status", pid), "VmRSS")
}

// HostDescription names the kernel the figures were taken on.
func HostDescription() string {
	b, err := os.ReadFile("/proc/version")
	if err != nil {
		return "unknown host"
	}
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return "Linux " + f[2]
	}
	return "Linux"
}

// Cores counts the host's processors.
func Cores() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\nprocessor") + 1
}
