package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/skills"
)

// parseRun runs only the flag and argument parsing of `skillbox run`: no
// config, registry, image or sandbox is touched, so no root is needed.
func parseRun(t *testing.T, args ...string) (*runOptions, error) {
	t.Helper()
	return parseOnly(runCommand(), parseRunArgs, args)
}

// parseOnly runs cmd with args, its action replaced by parse.
func parseOnly[T any](cmd *cli.Command, parse func(*cli.Context) (T, error), args []string) (T, error) {
	var got T
	cmd.Action = func(c *cli.Context) error {
		o, err := parse(c)
		got = o
		return err
	}
	app := &cli.App{
		Name: "skillbox", Commands: []*cli.Command{cmd},
		Writer: io.Discard, ErrWriter: io.Discard,
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.Run(append([]string{"skillbox", cmd.Name}, args...))
	return got, err
}

// wantExit checks err is an exitError with code whose message is one line
// containing every part of want.
func wantExit(t *testing.T, what string, err error, code int, want ...string) {
	t.Helper()
	var ee *exitError
	if !errors.As(err, &ee) {
		t.Fatalf("%s: want exit %d, got %T %v", what, code, err, err)
	}
	if ee.code != code {
		t.Fatalf("%s: want exit %d, got %d (%s)", what, code, ee.code, ee.msg)
	}
	if strings.Contains(ee.msg, "\n") {
		t.Errorf("%s: message is not one line: %q", what, ee.msg)
	}
	for _, w := range want {
		if !strings.Contains(ee.msg, w) {
			t.Errorf("%s: message %q does not mention %q", what, ee.msg, w)
		}
	}
}

func TestRunArgsSplit(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		skill string
		path  string
		rest  []string
	}{
		{[]string{"s", "scripts/x.py"}, "s", "scripts/x.py", []string{}},
		{[]string{"s", "scripts/x.py", "--", "a", "b c"}, "s", "scripts/x.py", []string{"a", "b c"}},
		{[]string{"s", "scripts/x.py", "a", "--", "b"}, "s", "scripts/x.py", []string{"a", "--", "b"}},
		{[]string{"s", "scripts/x.py", "--", "--", "x"}, "s", "scripts/x.py", []string{"--", "x"}},
		// Like docker run: after SCRIPT everything belongs to the script.
		{[]string{"s", "scripts/x.py", "--json"}, "s", "scripts/x.py", []string{"--json"}},
		{[]string{"--json", "--", "s", "scripts/x.py"}, "s", "scripts/x.py", []string{}},
	} {
		o, err := parseRun(t, tc.args...)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if o.skill != tc.skill || o.script != tc.path || !reflect.DeepEqual(append([]string{}, o.args...), tc.rest) {
			t.Errorf("%q: got skill %q script %q args %q", tc.args, o.skill, o.script, o.args)
		}
	}
	for _, args := range [][]string{{}, {"only-skill"}, {"--", "-x", "scripts/a.py"}, {"s", "--", "scripts/a.py"}} {
		_, err := parseRun(t, args...)
		wantExit(t, fmt.Sprintf("%q", args), err, 2, "usage:", "SKILL SCRIPT")
	}
}

func TestRunFlagUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--bogus", "s", "scripts/x.py"}, []string{"bogus", "skillbox run --help"}},
		{[]string{"--timeout", "zz", "s", "scripts/x.py"}, []string{"timeout"}},
		{[]string{"--timeout", "0s", "s", "scripts/x.py"}, []string{"--timeout", "positive"}},
		{[]string{"--timeout", "-1s", "s", "scripts/x.py"}, []string{"--timeout", "positive"}},
		{[]string{"--memory", "12zz", "s", "scripts/x.py"}, []string{"--memory", "zz"}},
		{[]string{"--memory", "0", "s", "scripts/x.py"}, []string{"--memory", "positive"}},
		{[]string{"--memory", "-5MiB", "s", "scripts/x.py"}, []string{"--memory"}},
		{[]string{"--pids", "0", "s", "scripts/x.py"}, []string{"--pids", "at least 1"}},
		{[]string{"--pids", "-1", "s", "scripts/x.py"}, []string{"--pids"}},
		{[]string{"--cpus", "0", "s", "scripts/x.py"}, []string{"--cpus", "positive"}},
		{[]string{"--cpus", "-2", "s", "scripts/x.py"}, []string{"--cpus"}},
		{[]string{"--cpus", "NaN", "s", "scripts/x.py"}, []string{"--cpus"}},
		{[]string{"--cpus", "+Inf", "s", "scripts/x.py"}, []string{"--cpus"}},
		{[]string{"--runtime", "docker", "s", "scripts/x.py"}, []string{"--runtime", "docker", "runsc", "kubernetes"}},
		{[]string{"--runtime", "kubernetes", "--containerd-address", "/s", "s", "scripts/x.py"}, []string{"--containerd-address", "not kubernetes"}},
	} {
		_, err := parseRun(t, tc.args...)
		wantExit(t, fmt.Sprintf("%q", tc.args), err, 2, tc.want...)
	}
}

// --runtime kubernetes selects the kubernetes backend (registered by the
// stack).
func TestRunRuntimeKubernetes(t *testing.T) {
	o, err := parseRun(t, "--runtime", "kubernetes", "s", "scripts/x.py")
	if err != nil {
		t.Fatal(err)
	}
	if o.runtime != "kubernetes" {
		t.Errorf("runtime %q, want kubernetes", o.runtime)
	}
}

func TestRunLimitFlags(t *testing.T) {
	o, err := parseRun(t, "--timeout", "2s", "--memory", "256MiB", "--pids", "10", "--cpus", "0.5", "s", "scripts/x.py")
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.Limits{Timeout: 2 * time.Second, MemoryBytes: 256 << 20, Pids: 10, CPUs: 0.5}
	if o.limits != want {
		t.Errorf("limits: got %+v, want %+v", o.limits, want)
	}
	o, err = parseRun(t, "s", "scripts/x.py")
	if err != nil {
		t.Fatal(err)
	}
	if o.limits != (runtime.Limits{}) {
		t.Errorf("no limit flags: got %+v, want all zero (policy defaults)", o.limits)
	}
}

func TestLoweredLimits(t *testing.T) {
	req := runtime.Limits{Timeout: time.Hour, MemoryBytes: 4 << 30, Pids: 10, CPUs: 0.5}
	got := runtime.Limits{Timeout: 30 * time.Second, MemoryBytes: 512 << 20, Pids: 10, CPUs: 0.5}
	w := loweredLimits(req, got)
	if len(w) != 2 || !strings.Contains(w[0], "--timeout 1h0m0s") || !strings.Contains(w[1], "512MiB") {
		t.Errorf("loweredLimits: %q", w)
	}
	if w := loweredLimits(runtime.Limits{}, got); len(w) != 0 {
		t.Errorf("nothing requested, yet warned: %q", w)
	}
}

func TestEnvFromFlags(t *testing.T) {
	env, err := envFromFlags([]string{"FOO=bar", "EMPTY=", "EQ=a=b", "PYTHONUNBUFFERED=1", "lower_case=1"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"FOO": "bar", "EMPTY": "", "EQ": "a=b", "PYTHONUNBUFFERED": "1", "lower_case": "1"}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("got %v, want %v", env, want)
	}
	for _, tc := range []struct {
		kv   []string
		want []string
	}{
		{[]string{"FOO"}, []string{`"FOO"`, "KEY=VALUE", `--env FOO="$FOO"`}},
		{[]string{"=x"}, []string{"KEY=VALUE"}},
		{[]string{"LD_PRELOAD=x"}, []string{"LD_PRELOAD", "refused", "other code"}},
		{[]string{"LD_LIBRARY_PATH=/tmp"}, []string{"LD_LIBRARY_PATH", "refused"}},
		{[]string{"PYTHONPATH=/tmp"}, []string{"PYTHONPATH", "refused"}},
		{[]string{"NODE_OPTIONS=--require=x"}, []string{"NODE_OPTIONS", "refused"}},
		{[]string{"BASH_ENV=/tmp/x"}, []string{"BASH_ENV", "refused"}},
		{[]string{"PATH=/tmp"}, []string{"PATH", "set by skillbox"}},
		{[]string{"HOME=/"}, []string{"HOME"}},
		{[]string{"1BAD=x"}, []string{"1BAD", "not a valid name"}},
		{[]string{"A-B=x"}, []string{"A-B"}},
		{[]string{"NUL=a\x00b"}, []string{"NUL"}},
		{[]string{"A=1", "A=2"}, []string{"--env A", "twice"}},
	} {
		_, err := envFromFlags(tc.kv)
		if err == nil {
			t.Errorf("%q: accepted", tc.kv)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: not one line: %q", tc.kv, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q does not mention %q", tc.kv, err, w)
			}
		}
	}
	// Through the command: a usage error, exit 2.
	_, err = parseRun(t, "--env", "LD_PRELOAD=/tmp/x.so", "s", "scripts/x.py")
	wantExit(t, "--env LD_PRELOAD", err, 2, "LD_PRELOAD", "refused")
}

func TestFilesFromFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, data string, mode os.FileMode) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("one/a.txt", "alpha", 0o600)
	b := write("two/b.sh", "beta", 0o755)
	a2 := write("two/a.txt", "other alpha", 0o644)
	out := write("three/outputs", "x", 0o644)

	files, err := filesFromFlags([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want := []runtime.InputFile{{Name: "a.txt", Data: []byte("alpha"), Mode: 0o600}, {Name: "b.sh", Data: []byte("beta"), Mode: 0o755}}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("got %+v, want %+v", files, want)
	}

	// Two files with one base name would overwrite each other in the workdir.
	_, err = filesFromFlags([]string{a, a2})
	if !errors.Is(err, errFileFlagUsage) || !strings.Contains(err.Error(), `"a.txt"`) || !strings.Contains(err.Error(), a) {
		t.Errorf("collision: got %v", err)
	}
	_, err = parseRun(t, "--file", a, "--file", a2, "s", "scripts/x.py")
	wantExit(t, "collision via the command", err, 2, "a.txt", "rename")

	for _, p := range []string{out, "", a + ":", a + ":../x", a + ":/abs", a + ":a\x1bb", a + "://x"} {
		if _, err := filesFromFlags([]string{p}); !errors.Is(err, errFileFlagUsage) {
			t.Errorf("%q: want a usage error, got %v", p, err)
		}
	}
	// A missing file is not a usage error: exit 1, naming the path.
	missing := filepath.Join(dir, "nope.txt")
	_, err = filesFromFlags([]string{missing})
	if err == nil || errors.Is(err, errFileFlagUsage) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: got %v", err)
	}
	_, err = parseRun(t, "--file", missing, "s", "scripts/x.py")
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		t.Errorf("missing file via the command: want a plain error (exit 1), got %v", err)
	}

	// Too large for one input file.
	big := filepath.Join(dir, "big.bin")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxInputFile + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := filesFromFlags([]string{big}); !errors.Is(err, errFileFlagUsage) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("big file: got %v", err)
	}
}

func TestFilesFromFlagsDirectories(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "unpacked")
	for rel, data := range map[string]string{
		"[Content_Types].xml":   "<Types/>",
		"ppt/presentation.xml":  "<p/>",
		"ppt/slides/slide1.xml": "<s/>",
		"ppt/_rels/.rels":       "<r/>",
	} {
		p := filepath.Join(tree, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(tree, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(tree, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../secret", filepath.Join(tree, "ppt", "rel-link")); err != nil {
		t.Fatal(err)
	}
	files, err := filesFromFlags([]string{tree, tree + ":copy/of/it", secret + ":in/s.txt"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		v := string(f.Kind) + ":" + string(f.Data) + f.Target
		if strings.Contains(string(f.Data), "SECRET") && f.Name != "in/s.txt" {
			t.Errorf("%s: a link was followed", f.Name)
		}
		got[f.Name] = v
	}
	for name, want := range map[string]string{
		"unpacked":                        "dir:",
		"unpacked/[Content_Types].xml":    ":<Types/>",
		"unpacked/ppt/slides/slide1.xml":  ":<s/>",
		"unpacked/ppt/_rels/.rels":        ":<r/>",
		"unpacked/empty":                  "dir:",
		"unpacked/abs-link":               "symlink:" + secret,
		"unpacked/ppt/rel-link":           "symlink:../../secret",
		"copy/of/it/ppt/presentation.xml": ":<p/>",
		"copy/of/it/empty":                "dir:",
		"in/s.txt":                        ":SECRET",
	} {
		if got[name] != want {
			t.Errorf("%s: got %q, want %q", name, got[name], want)
		}
	}
	if err := runtime.ValidateInputs(files, 1<<30); err != nil {
		t.Errorf("the entries do not validate: %v", err)
	}

	// Special files are refused by name.
	if err := syscall.Mkfifo(filepath.Join(tree, "ppt", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = filesFromFlags([]string{tree})
	if !errors.Is(err, errFileFlagUsage) || !strings.Contains(err.Error(), "fifo") || !strings.Contains(err.Error(), "special file") {
		t.Errorf("fifo: got %v", err)
	}
	// The same name twice, or a name under a file.
	for _, specs := range [][]string{{tree + ":x", secret + ":x"}, {secret + ":x", tree + ":x/y"}} {
		if _, err := filesFromFlags(specs); !errors.Is(err, errFileFlagUsage) {
			t.Errorf("%q: got %v", specs, err)
		}
	}
}

func TestSaveOutputs(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "out", "here") // created on demand
	outs := []runtime.OutputFile{
		{Path: "a.txt", Data: []byte("A")},
		{Path: "sub/deeper/b.txt", Data: []byte("B")},
	}
	saved, err := saveOutputs(dir, outs)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "a.txt"), filepath.Join(dir, "sub", "deeper", "b.txt")}; !reflect.DeepEqual(saved, want) {
		t.Errorf("saved %q, want %q", saved, want)
	}
	for p, want := range map[string]string{"a.txt": "A", "sub/deeper/b.txt": "B"} {
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v", p, got, err)
		}
	}
	if saved, err := saveOutputs(dir, nil); err != nil || len(saved) != 0 {
		t.Errorf("no outputs: %q, %v", saved, err)
	}
}

func TestSaveOutputsConfined(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "out")
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(outside, "victim.txt")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Paths that name something outside dir are refused, whatever their form.
	for _, p := range []string{"../escape.txt", "../out2/x", "a/../../escape.txt", "/abs.txt", "..", "", "sub/../../../escape.txt"} {
		_, err := saveOutputs(dir, []runtime.OutputFile{{Path: p, Data: []byte("evil")}})
		if err == nil {
			t.Errorf("%q: saved", p)
		}
	}
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if e.Name() != "out" && e.Name() != "outside" {
			t.Errorf("something was written outside the outputs dir: %s", e.Name())
		}
	}
	if _, err := os.Stat("/abs.txt"); err == nil {
		t.Errorf("/abs.txt was written")
	}

	// A symlink already in dir is replaced, never written through.
	if err := os.Symlink(victim, filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := saveOutputs(dir, []runtime.OutputFile{{Path: "link.txt", Data: []byte("new")}}); err != nil {
		t.Fatalf("replacing a symlink: %v", err)
	}
	if st, err := os.Lstat(filepath.Join(dir, "link.txt")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("link.txt is not a regular file now: %v %v", st, err)
	}
	// A symlinked directory in dir leading out is not followed.
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if _, err := saveOutputs(dir, []runtime.OutputFile{{Path: "sub/victim.txt", Data: []byte("evil")}}); err == nil {
		t.Errorf("wrote through a symlinked directory")
	}
	if _, err := saveOutputs(dir, []runtime.OutputFile{{Path: "sub/new.txt", Data: []byte("evil")}}); err == nil {
		t.Errorf("wrote a new file through a symlinked directory")
	}
	if got, _ := os.ReadFile(victim); string(got) != "untouched" {
		t.Errorf("the file outside was changed: %q", got)
	}
	// A symlinked directory pointing inside dir is not followed either.
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "inner")); err != nil {
		t.Fatal(err)
	}
	if _, err := saveOutputs(dir, []runtime.OutputFile{{Path: "inner/x.txt", Data: []byte("x")}}); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("wrote through an inner symlinked directory: %v", err)
	}
	// A special file in the way is refused, not replaced.
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := saveOutputs(dir, []runtime.OutputFile{{Path: "fifo", Data: []byte("x")}}); err == nil || !strings.Contains(err.Error(), "fifo") {
		t.Errorf("fifo in the way: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Errorf("a file was created outside")
	}

	// --outputs naming a file is reported before anything runs.
	if err := prepareOutputsDir(victim); err == nil || !strings.Contains(err.Error(), "--outputs") {
		t.Errorf("--outputs FILE: %v", err)
	}
}

func TestScriptExitCode(t *testing.T) {
	for _, tc := range []struct {
		res  runtime.Result
		want int
	}{
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit}}, 0},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit, ExitCode: 3}}, 3},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit, ExitCode: 255}}, 255},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonKilled, Signal: "SIGKILL", ExitCode: -1}}, 137},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit, Signal: "SIGTERM"}}, 143},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit, Signal: "TERM"}}, 143},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit, Signal: "SIGWHAT"}}, 137},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonTimeout, Signal: "SIGKILL"}}, 137},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonTimeout, ExitCode: 0}}, exitTimeout}, // caught SIGTERM, exited 0
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonTimeout, ExitCode: 2}}, 2},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonOOM}}, 1},
		{runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonOutputCap}}, 1},
	} {
		if got := scriptExitCode(&tc.res); got != tc.want {
			t.Errorf("%+v: got %d, want %d", tc.res, got, tc.want)
		}
	}
}

func TestCLIErrorOneLine(t *testing.T) {
	err := errkind.Wrap(api.ErrInvalidParams, errkind.Errorf(runtime.ErrInvalidJob, "environment variable %q can make the interpreter run other code", "LD_AUDIT"))
	got := cliError(err)
	if got.Error() != `environment variable "LD_AUDIT" can make the interpreter run other code` {
		t.Errorf("got %q", got)
	}
	if !errors.Is(got, api.ErrInvalidParams) || !errors.Is(got, runtime.ErrInvalidJob) {
		t.Errorf("the sentinels are lost: %v", got)
	}
	got = cliError(errkind.Errorf(api.ErrInternal, "sandbox failed: runsc: exit 1\nstderr line\n"))
	if strings.Contains(got.Error(), "\n") || !strings.HasPrefix(got.Error(), "sandbox failed") {
		t.Errorf("got %q", got)
	}
}

func TestSkillNotFoundNamesRoots(t *testing.T) {
	err := errkind.Errorf(skills.ErrNotFound, "no skill named %q; list the available names with skills.list or 'skillbox skills list --root DIR'", "nope")
	got := skillNotFound(err, []string{"/a", "/b"})
	if !strings.Contains(got.Error(), "'skillbox skills list --root /a --root /b'") || !errors.Is(got, skills.ErrNotFound) {
		t.Errorf("got %q", got)
	}
	other := errors.New("boom")
	if skillNotFound(other, nil) != other {
		t.Errorf("other errors must pass through")
	}
}

func TestCLIImagesNoBuild(t *testing.T) {
	dir := t.TempDir()
	store, err := images.OpenStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	recipes, err := images.LoadRecipes()
	if err != nil {
		t.Fatal(err)
	}
	store.SetRecipes(recipes)
	src := &cliImages{StoreImages: &runner.StoreImages{Store: store, Recipes: recipes}, noBuild: true}
	var progress strings.Builder
	_, _, err = src.Ensure(context.Background(), "shell", &progress)
	if err == nil {
		t.Fatal("--no-build with an empty store: no error")
	}
	for _, w := range []string{`"shell"`, "--no-build", "skillbox images build --dir " + dir + " shell"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not mention %q", err, w)
		}
	}
	if progress.Len() != 0 {
		t.Errorf("nothing should be built: %q", progress.String())
	}
	// An image no recipe knows is reported by the store as it is.
	if _, _, err := src.Ensure(context.Background(), "cobol", &progress); err == nil || !errors.Is(err, images.ErrUnknownImage) {
		t.Errorf("unknown image: %v", err)
	}
}

func TestStdinFromFlag(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(p, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, arg, want string
		wantErr         bool
	}{
		{"none", "", "", false},
		{"file", p, "hello\n", false},
		{"missing", filepath.Join(dir, "nope"), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := stdinFromFlag(tc.arg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if string(got) != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRootCheck(t *testing.T) {
	if err := rootCheck("run", "runsc", 0); err != nil {
		t.Errorf("root: %v", err)
	}
	if err := rootCheck("serve", "kubernetes", 65532); err != nil {
		t.Errorf("non-root on kubernetes (nothing on this host): %v", err)
	}
	err := rootCheck("serve", "runc", 1000)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "serve needs root") ||
		!strings.Contains(err.Error(), "sudo skillbox serve") || !strings.Contains(err.Error(), "uid 1000") {
		t.Errorf("non-root: %v", err)
	}
}
