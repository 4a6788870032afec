package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/service"
	"github.com/skillbox/skillbox/skills"
)

// benchCommand measures what DESIGN.md's performance goals name. Every figure
// is reported next to a baseline taken in the same run (a native interpreter
// start, a cold runtime run), so results compare across machines as ratios.
func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure run latency, throughput, registry and audit costs (ratios against baselines from the same run)",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "runs", Value: 20, Usage: "runs per latency series (median of these)"},
			&cli.StringSliceFlag{Name: "runtime", Value: cli.NewStringSlice("runsc", "runc"), Usage: "runtimes to measure"},
			&cli.StringFlag{Name: "root", Value: "examples/skills", Usage: "skill root holding hello-python"},
			&cli.StringFlag{Name: "images", Usage: "image store `DIR` (default $SKILLBOX_IMAGES or /var/lib/skillbox/images)"},
			&cli.IntFlag{Name: "skills", Value: 10000, Usage: "skills to index for the registry figures"},
			&cli.IntFlag{Name: "audit-runs", Value: 10000, Usage: "runs (start+end records) to verify for the audit figure"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "concurrent runs for the throughput figure"},
			&cli.StringSliceFlag{Name: "only", Usage: "run only these parts: cold, daemon, throughput, registry, audit"},
			&cli.BoolFlag{Name: "json", Usage: "print the figures as JSON"},
		},
		Action: benchAction,
	}
}

// figure is one measured value with what it is compared against.
type figure struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Baseline string  `json:"baseline,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	Note     string  `json:"note,omitempty"`
}

type bench struct {
	c       *cli.Context
	log     hclog.Logger
	figures []figure
}

func (b *bench) add(f figure) {
	b.figures = append(b.figures, f)
	if !b.c.Bool("json") {
		line := fmt.Sprintf("%-44s %10.2f %-6s", f.Name, f.Value, f.Unit)
		if f.Baseline != "" {
			line += fmt.Sprintf("  %6.2fx %s", f.Ratio, f.Baseline)
		}
		if f.Note != "" {
			line += "  (" + f.Note + ")"
		}
		fmt.Println(line)
	}
}

func benchAction(c *cli.Context) error {
	b := &bench{c: c, log: newLogger("bench", hclog.Warn, os.Stderr)}
	only := map[string]bool{}
	for _, o := range c.StringSlice("only") {
		only[o] = true
	}
	want := func(part string) bool { return len(only) == 0 || only[part] }
	ctx := c.Context
	if !c.Bool("json") {
		fmt.Printf("skillbox bench: %s, %d cores\n", hostDescription(), nproc())
	}

	native := 0.0
	if want("cold") || want("daemon") {
		var err error
		if native, err = b.native(c.Int("runs")); err != nil {
			return err
		}
	}
	cold := map[string]float64{}
	if want("cold") {
		for _, rt := range c.StringSlice("runtime") {
			med, err := b.cold(ctx, rt, c.Int("runs"), native)
			if err != nil {
				return err
			}
			cold[rt] = med
		}
	}
	if want("daemon") {
		if err := b.daemon(ctx, c.Int("runs"), cold["runsc"], native); err != nil {
			return err
		}
	}
	if want("throughput") {
		if err := b.throughput(ctx, c.Int("concurrency"), c.Int("runs")); err != nil {
			return err
		}
	}
	if want("registry") {
		if err := b.registry(ctx, c.Int("skills")); err != nil {
			return err
		}
	}
	if want("audit") {
		if err := b.audit(ctx, c.Int("audit-runs")); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(b.figures)
	}
	return nil
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
	b.add(figure{Name: "native python3 hello (median)", Value: med, Unit: "ms", Note: fmt.Sprintf("n=%d", n)})
	return med, nil
}

func (b *bench) engine(rt string, log hclog.Logger) (*service.Engine, *skills.Skill, error) {
	cfg := policy.Default()
	eng, err := newEngine(cfg, engineOptions{runtime: rt, imageDir: b.c.String("images"), progress: os.Stderr}, log)
	if err != nil {
		return nil, nil, err
	}
	reg, err := openRegistry(b.c.Context, cfg, []string{b.c.String("root")}, log)
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
	if _, err := eng.Run(ctx, service.RunRequest{Skill: sk, Script: "scripts/hello.py"}); err != nil {
		return 0, fmt.Errorf("%s: %w", rt, err)
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		out, err := eng.Run(ctx, service.RunRequest{Skill: sk, Script: "scripts/hello.py"})
		if err != nil {
			return 0, fmt.Errorf("%s: %w", rt, err)
		}
		if out.Result.ExitCode != 0 {
			return 0, fmt.Errorf("%s: hello.py exited %d: %s", rt, out.Result.ExitCode, out.Result.Stderr)
		}
		ds = append(ds, time.Since(t))
	}
	med := ms(median(ds))
	b.add(figure{Name: fmt.Sprintf("cold run hello.py, %s (median)", rt), Value: med, Unit: "ms",
		Baseline: "native python3", Ratio: med / native, Note: fmt.Sprintf("n=%d, p90 %.0f ms", n, ms(pct(ds, 0.9)))})
	return med, nil
}

// daemonFixture starts the daemon in-process on a temp socket with the bench's
// skill root and no confirmation rules.
func (b *bench) daemonFixture(ctx context.Context) (*runningDaemon, string, func(), error) {
	dir, err := os.MkdirTemp("", "skillbox-bench-")
	if err != nil {
		return nil, "", nil, err
	}
	root, _ := filepath.Abs(b.c.String("root"))
	imgDir := b.c.String("images")
	if imgDir == "" {
		imgDir = os.Getenv("SKILLBOX_IMAGES")
	}
	if imgDir == "" {
		imgDir = "/var/lib/skillbox/images"
	}
	src := fmt.Sprintf(`
daemon {
  socket    = %q
  state_dir = %q
  audit_dir = %q
  max_concurrent_runs = 16
}
skills { roots = [%q] }
images { dir = %q }
`, filepath.Join(dir, "s.sock"), filepath.Join(dir, "state"), filepath.Join(dir, "audit"), root, imgDir)
	cfg, err := policy.Parse([]byte(src), filepath.Join(dir, "bench.hcl"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	rd, err := startDaemon(ctx, cfg, hclog.NewNullLogger())
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	cleanup := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rd.close(sctx, "bench done")
		os.RemoveAll(dir)
	}
	return rd, cfg.Daemon.Socket, cleanup, nil
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

// daemon times run_script end to end: request on the socket to result.
func (b *bench) daemon(ctx context.Context, n int, coldRunsc, native float64) error {
	_, sock, cleanup, err := b.daemonFixture(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cl, err := client.Dial(ctx, sock)
	if err != nil {
		return err
	}
	defer cl.Close()
	sid, err := loadedSession(ctx, cl)
	if err != nil {
		return err
	}
	run := func() error {
		var r api.RunScriptResult
		if err := cl.Call(ctx, "skills.run_script", api.RunScriptParams{SessionID: sid, Path: "scripts/hello.py"}, &r); err != nil {
			return err
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("hello.py exited %d: %s", r.ExitCode, r.Stderr)
		}
		return nil
	}
	if err := run(); err != nil {
		return err
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := run(); err != nil {
			return err
		}
		ds = append(ds, time.Since(t))
	}
	med := ms(median(ds))
	f := figure{Name: "daemon run_script hello.py, runsc (p50)", Value: med, Unit: "ms", Note: fmt.Sprintf("n=%d, p90 %.0f ms, goal 50 ms", n, ms(pct(ds, 0.9)))}
	if coldRunsc > 0 {
		f.Baseline, f.Ratio = "cold runsc run", med/coldRunsc
	} else {
		f.Baseline, f.Ratio = "native python3", med/native
	}
	b.add(f)

	var rss int64
	if rss, err = rssOf(os.Getpid()); err == nil {
		b.add(figure{Name: "bench process RSS with daemon running", Value: float64(rss) / (1 << 20), Unit: "MiB"})
	}
	return nil
}

// throughput runs many scripts with `conc` clients at once through the daemon.
func (b *bench) throughput(ctx context.Context, conc, perClient int) error {
	_, sock, cleanup, err := b.daemonFixture(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	start := time.Now()
	total := conc * perClient
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := client.Dial(ctx, sock)
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			sid, err := loadedSession(ctx, cl)
			if err != nil {
				errs <- err
				return
			}
			for i := 0; i < perClient; i++ {
				var r api.RunScriptResult
				if err := cl.Call(ctx, "skills.run_script", api.RunScriptParams{SessionID: sid, Path: "scripts/hello.py"}, &r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	el := time.Since(start)
	perRun := el / time.Duration(total)
	b.add(figure{Name: fmt.Sprintf("throughput, %d concurrent clients, runsc", conc), Value: float64(total) / el.Seconds(), Unit: "runs/s",
		Note: fmt.Sprintf("%d runs in %.1f s, %.0f ms per run", total, el.Seconds(), ms(perRun))})
	return nil
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
	b.add(figure{Name: fmt.Sprintf("registry: index %d skills (cold)", n), Value: ms(first), Unit: "ms"})
	b.add(figure{Name: fmt.Sprintf("registry: reload %d unchanged skills", n), Value: ms(again), Unit: "ms", Baseline: "cold index", Ratio: float64(again) / float64(first)})
	b.add(figure{Name: fmt.Sprintf("RSS growth with %d skills indexed", n), Value: float64(after-before) / (1 << 20), Unit: "MiB", Note: fmt.Sprintf("process RSS %.0f MiB", float64(after)/(1<<20))})
	return nil
}

// audit writes n run start/end record pairs and verifies the chain.
func (b *bench) audit(ctx context.Context, n int) error {
	dir, err := os.MkdirTemp("", "skillbox-bench-audit-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := audit.Open(dir, audit.Options{Logger: hclog.NewNullLogger()})
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
	b.add(figure{Name: fmt.Sprintf("audit: append %d records (fsync each)", 2*n), Value: ms(appendDur) / float64(2*n), Unit: "ms/rec"})
	b.add(figure{Name: fmt.Sprintf("audit: verify %d runs (%d records)", n, rep.Records), Value: verifyDur.Seconds(), Unit: "s",
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
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, io.ErrUnexpectedEOF
}

func hostDescription() string {
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

func nproc() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\nprocessor") + 1
}
