package policy

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

func mustLoad(t *testing.T, path string) *Config {
	t.Helper()
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	return c
}

func TestIssueFileAcceptedAsIs(t *testing.T) {
	c := mustLoad(t, "testdata/issue.hcl")
	checks := []struct {
		name      string
		got, want any
	}{
		{"socket", c.Daemon.Socket, "/run/skillbox/skillbox.sock"},
		{"state_dir", c.Daemon.StateDir, "/var/lib/skillbox"},
		{"audit_dir", c.Daemon.AuditDir, "/var/log/skillbox"},
		{"approvers", strings.Join(c.Daemon.Approvers, ","), "root"},
		{"roots", strings.Join(c.Skills.Roots, ","), "/etc/skillbox/skills"},
		{"rules", len(c.Rules), 2},
		{"rule 0", c.Rules[0].String(), `policy "default" (testdata/issue.hcl:10)`},
		{"rule 1", c.Rules[1].String(), `policy "needs-approval" (testdata/issue.hcl:14)`},
		{"socket_mode default", c.Daemon.SocketMode, fs.FileMode(0o660)},
		{"runtime default", c.Daemon.Runtime, "runsc"},
		{"tool_mode default", c.Daemon.ToolMode, ToolModeRestrict},
		{"limits default", c.Limits, runtime.DefaultLimits},
		{"images dir", c.Images.Dir, "/var/lib/skillbox/images"},
	}
	for _, ck := range checks {
		t.Run(ck.name, func(t *testing.T) {
			if ck.got != ck.want {
				t.Errorf("got %v, want %v", ck.got, ck.want)
			}
		})
	}
	d := c.Decide(Request{Skill: "guarded-pdf", Tool: "skills.run_script"})
	if d.Effect != EffectConfirm || d.Rule != `policy "needs-approval" (testdata/issue.hcl:14)` {
		t.Errorf("guarded-pdf run_script: %+v", d)
	}
}

func TestExampleConfig(t *testing.T) {
	c := mustLoad(t, "../examples/skillbox.hcl")
	if len(c.Rules) != 2 || c.Rules[1].Name != "needs-approval" {
		t.Fatalf("rules: %+v", c.Rules)
	}
}

func TestMinimalFile(t *testing.T) {
	c := mustLoad(t, "testdata/minimal.hcl")
	if got, want := c.Skills.Roots, []string{filepath.Join("testdata", "skills")}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("roots %v, want %v (relative to the file)", got, want)
	}
	if len(c.Rules) != 1 || c.Rules[0].Name != "default" || c.Rules[0].Pos.Line != 0 {
		t.Fatalf("want the built-in default rule, got %+v", c.Rules)
	}
	d := c.Decide(Request{Skill: "any", Tool: "skills.run_script"})
	if d.Effect != EffectAllow || d.Rule != `policy "default" (built-in)` {
		t.Errorf("decision %+v", d)
	}
	if d := c.Decide(Request{Skill: "any", Tool: "Bash"}); d.Effect != EffectDeny {
		t.Errorf("Bash under the built-in rule: %+v", d)
	}
}

func TestEmptyFile(t *testing.T) {
	c, err := Parse(nil, "empty.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.Daemon.Socket == "" || len(c.Images.List) != 3 {
		t.Errorf("defaults missing: %+v", c.Daemon)
	}
}

func TestFullFile(t *testing.T) {
	c := mustLoad(t, "testdata/full.hcl")
	py := c.Image("python")
	checks := []struct {
		name      string
		got, want any
	}{
		{"socket_mode", c.Daemon.SocketMode, fs.FileMode(0o600)},
		{"socket_group", c.Daemon.SocketGroup, "skillbox"},
		{"approvers", strings.Join(c.Daemon.Approvers, ","), "alice,1001"},
		{"max_connections", c.Daemon.MaxConnections, 10},
		{"max_concurrent_runs", c.Daemon.MaxConcurrentRuns, 2},
		{"max_active_skills", c.Daemon.MaxActiveSkills, 3},
		{"run_queue_timeout", c.Daemon.RunQueueTimeout, 5 * time.Second},
		{"idle_timeout", c.Daemon.IdleTimeout, time.Hour},
		{"max_line_bytes", c.Daemon.MaxLineBytes, 1 << 20},
		{"confirmation_ttl", c.Daemon.ConfirmationTTL, 2 * time.Minute},
		{"pool", c.Pool.PoolConfig, runtime.PoolConfig{PerKey: 3, Total: 6, IdleTimeout: 5 * time.Minute, MemoryBudget: 200 << 20}},
		{"sessions", c.Sessions, SessionConfig{IdleTimeout: 30 * time.Minute, CheckpointBudget: 8 << 30, CheckpointBudgetPerSession: 1 << 30, CheckpointBudgetPerUID: 3 << 30, CheckpointDiskPercent: 40, MaxSandboxes: 4, BackgroundRuns: 2, Pos: Pos{File: "testdata/full.hcl", Line: 90}}},
		{"runtime", c.Daemon.Runtime, "runc"},
		{"tool_mode", c.Daemon.ToolMode, ToolModePreapprove},
		{"roots", strings.Join(c.Skills.Roots, ","), "/srv/skills,testdata/local"},
		{"allow_extensions", c.Skills.AllowExtensions, true},
		{"catalog_budget", c.Skills.CatalogBudget, 8000},
		{"max_depth", c.Skills.MaxDepth, 2},
		{"max_skills", c.Skills.MaxSkills, 100},
		{"max_read_bytes", c.Skills.MaxReadBytes, int64(65536)},
		{"runsc binary", c.Runtimes["runsc"].Binary, "/usr/local/bin/runsc"},
		{"runsc platform", c.Runtimes["runsc"].Platform, "ptrace"},
		{"runsc flags", strings.Join(c.Runtimes["runsc"].Flags, " "), "--debug"},
		{"runsc options", c.RuntimeOptions("runsc").Settings.String("state_dir"), "/run/sb/runsc"},
		{"runc state default", c.Runtimes["runc"].StateDir, "/run/skillbox/runc"},
		{"images dir", c.Images.Dir, "/var/lib/sb/images"},
		{"recipes", strings.Join(c.Images.RecipesDirs, ","), "testdata/recipes"},
		{"python exts", strings.Join(py.Extensions, ","), ".py,.pyw"},
		{"python interpreter kept", strings.Join(py.Interpreter, " "), "python3"},
		{"ruby shebang default", strings.Join(c.Image("ruby").Shebangs, ","), "ruby"},
		{"ruby recipe default", c.Image("ruby").Recipe, "ruby"},
		{"r ref", c.Image("r").Ref, "registry.example.com/stats/r-base:4.4"},
		{"r has no recipe", c.Image("r").Recipe, ""},
		{"timeout", c.Limits.Timeout, time.Minute},
		{"memory", c.Limits.MemoryBytes, int64(1e9)},
		{"pids", c.Limits.Pids, int64(256)},
		{"cpus", c.Limits.CPUs, 2.0},
		{"workdir", c.Limits.WorkdirBytes, int64(128 << 20)},
		{"tmp", c.Limits.TmpBytes, int64(32 << 20)},
		{"stdout", c.Limits.StdoutBytes, int64(2 << 20)},
		{"stderr", c.Limits.StderrBytes, int64(4096)},
		{"outputs", c.Limits.OutputBytes, int64(8 << 20)},
		{"output_files", c.Limits.OutputFiles, 10},
		{"output_file_bytes", c.Limits.OutputFileBytes, int64(4 << 20)},
		{"rule script_dirs", strings.Join(c.Rules[1].ScriptDirs, ","), "scripts,core"},
		{"no script_dirs", c.Rules[0].ScriptDirs == nil, true},
		{"rotate", c.Audit.RotateBytes, int64(100e6)},
		{"rotate_age", c.Audit.RotateAge, 24 * time.Hour},
		{"checkpoint_key", c.Audit.CheckpointKey, "testdata/keys/audit.pem"},
		{"checkpoint_interval", c.Audit.CheckpointInterval, 10 * time.Minute},
		{"rule limits", c.Rules[1].Limits.MemoryBytes, int64(256 << 20)},
		{"rule network", *c.Rules[1].Network, true},
	}
	for _, ck := range checks {
		t.Run(ck.name, func(t *testing.T) {
			if ck.got != ck.want {
				t.Errorf("got %v, want %v", ck.got, ck.want)
			}
		})
	}
}

func TestJSONSyntax(t *testing.T) {
	src := `{"daemon": {"socket": "/run/j.sock"}, "policy": {"p": {"skills": ["*"], "tools": ["Read"]}}}`
	c, err := Parse([]byte(src), "skillbox.hcl.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Daemon.Socket != "/run/j.sock" || c.Rules[0].String() != `policy "p" (skillbox.hcl.json:1)` {
		t.Errorf("got %q %s", c.Daemon.Socket, c.Rules[0])
	}
	if _, err := Parse([]byte(`{"daemon": {"sokcet": "x"}}`), "x.json"); err == nil || !strings.Contains(err.Error(), "x.json:1:") {
		t.Errorf("unknown key in JSON: %v", err)
	}
}

// Each file in testdata/invalid starts with "# want: TEXT" lines; every TEXT
// must appear in the error, which must wrap ErrConfig.
func TestInvalidFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid/*.hcl")
	if len(files) < 20 {
		t.Fatalf("only %d invalid fixtures", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var wants []string
			sc := bufio.NewScanner(strings.NewReader(string(src)))
			for sc.Scan() {
				if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
					wants = append(wants, w)
				}
			}
			if len(wants) == 0 {
				t.Fatal("fixture has no # want: line")
			}
			_, err = Parse(src, filepath.Base(f))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error does not wrap ErrConfig: %v", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("not a *ConfigError: %T", err)
			}
			for _, w := range wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			for _, p := range ce.Problems {
				if p.Line == 0 {
					t.Errorf("problem without a line: %+v", p)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/nope.hcl")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v", err)
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if c.File != "" || c.Daemon.Runtime != "runsc" || c.Daemon.ToolMode != ToolModeRestrict {
		t.Errorf("daemon %+v", c.Daemon)
	}
	if c.Limits != runtime.DefaultLimits {
		t.Errorf("limits %+v", c.Limits)
	}
	if d := c.Daemon; d.WorkspaceQuota != 1<<30 || d.WorkspaceQuotaPerUID != 4<<30 || d.WorkspaceQuotaTotal != 16<<30 {
		t.Errorf("workspace quotas %d, per uid %d, total %d", d.WorkspaceQuota, d.WorkspaceQuotaPerUID, d.WorkspaceQuotaTotal)
	}
	if c.Hash() != Default().Hash() || !strings.HasPrefix(c.Hash(), "sha256:") {
		t.Errorf("hash %q", c.Hash())
	}
	for _, tc := range []struct {
		tool string
		want Effect
	}{{"skills.run_script", EffectAllow}, {"skills.read", EffectAllow}, {"skills.run_code", EffectAllow}, {"Bash", EffectDeny}, {NetworkTool, EffectDeny}} {
		if d := c.Decide(Request{Skill: "x", Tool: tc.tool}); d.Effect != tc.want {
			t.Errorf("%s: %+v", tc.tool, d)
		}
	}
	if l, rules := c.LimitsFor("x"); l != runtime.DefaultLimits || len(rules) != 1 || rules[0] != "limits (built-in)" {
		t.Errorf("LimitsFor: %+v %v", l, rules)
	}
	if in, err := c.Interpreter("scripts/a.py", nil); err != nil || in.Image != "python" {
		t.Errorf("Interpreter: %+v %v", in, err)
	}
}

func TestHash(t *testing.T) {
	a, _ := Parse([]byte("daemon {}\n"), "a.hcl")
	b, _ := Parse([]byte("daemon {}\n"), "b.hcl")
	c, _ := Parse([]byte("daemon {}\n\n"), "a.hcl")
	if a.Hash() != b.Hash() {
		t.Error("same bytes, different hash")
	}
	if a.Hash() == c.Hash() {
		t.Error("different bytes, same hash")
	}
	if sum := sha256.Sum256([]byte("daemon {}\n")); a.Hash() != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("hash %q", a.Hash())
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"512MiB", 512 << 20, false},
		{"1G", 1e9, false},
		{"1g", 1e9, false},
		{"1GiB", 1 << 30, false},
		{"1Gi", 1 << 30, false},
		{"64k", 64000, false},
		{"1.5KiB", 1536, false},
		{"1048576", 1 << 20, false},
		{"10 MB", 10e6, false},
		{"0", 0, false},
		{"", 0, true},
		{"-1", 0, true},
		{"1.5", 0, true},
		{"12XB", 0, true},
		{"99999999TiB", 0, true},
		{"MiB", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ParseSize(%q) = %d, %v; want %d, err=%v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
	if FormatSize(512<<20) != "512MiB" || FormatSize(1000) != "1000B" || FormatSize(3<<30) != "3GiB" {
		t.Error("FormatSize")
	}
}

func TestParseMode(t *testing.T) {
	for in, ok := range map[string]bool{"0660": true, "660": true, "0777": true, "0": true, "0999": false, "1777": false, "rw": false, "": false} {
		if _, err := parseMode(in); (err == nil) != ok {
			t.Errorf("parseMode(%q): %v", in, err)
		}
	}
}

func TestImagesBuildOnDemand(t *testing.T) {
	if Default().Images.BuildOnDemand {
		t.Error("build_on_demand is on by default: a missing image would be built inside a call")
	}
	c, err := Parse([]byte("images {\n  build_on_demand = true\n}\n"), "b.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Images.BuildOnDemand {
		t.Error("build_on_demand = true not read")
	}
	c, err = Parse([]byte("images {\n  dir = \"/x\"\n  build_on_demand = false\n}\n"), "b.hcl")
	if err != nil || c.Images.BuildOnDemand || c.Images.Dir != "/x" {
		t.Errorf("build_on_demand = false: %+v %v", c.Images, err)
	}
	_, err = Parse([]byte("images {\n  build_on_demand = \"yes\"\n}\n"), "b.hcl")
	if err == nil || !strings.Contains(err.Error(), "b.hcl:2") || !strings.Contains(err.Error(), "true or false") {
		t.Errorf("build_on_demand = \"yes\": %v", err)
	}
}

func TestContainerdRuntime(t *testing.T) {
	src := `daemon {
  runtime = "containerd"
}
runtime "containerd" {
  address   = "/run/k8s/containerd.sock"
  namespace = "agents"
  handler   = "io.containerd.runc.v2"
  binary    = "/usr/local/bin/runsc"
  flags     = ["--debug"]
}
`
	c, err := Parse([]byte(src), "c.hcl")
	if err != nil {
		t.Fatal(err)
	}
	got := c.RuntimeOptions("containerd")
	want := runtime.Options{Settings: runtime.Settings{"binary": "/usr/local/bin/runsc", "state_dir": "/run/skillbox/containerd", "flags": []string{"--debug"},
		"address": "/run/k8s/containerd.sock", "namespace": "agents", "handler": runtime.ContainerdHandlerRuncV2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options %+v, want %+v", got, want)
	}
	d := Default().RuntimeOptions("containerd").Settings
	if d.String("handler") != runtime.ContainerdHandlerRunsc || d.String("address") != "/run/containerd/containerd.sock" || d.String("namespace") != "skillbox" || d.String("binary") != "" {
		t.Errorf("default containerd options %+v", d)
	}
}

// TestKubernetesRuntime: daemon { runtime = "kubernetes" } with its
// runtime block, which the backend decodes (runtime/kubernetes.DecodeOptions).
func TestKubernetesRuntime(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      runtime.Settings // RuntimeOptions("kubernetes").Settings
		err       string
	}{
		{
			name: "defaults",
			src:  "daemon {\n  runtime = \"kubernetes\"\n}\n",
			want: runtime.Settings{"namespace": "skillbox", "state_dir": "/run/skillbox/kubernetes"},
		},
		{
			name: "block",
			src:  "daemon {\n  runtime = \"kubernetes\"\n}\nruntime \"kubernetes\" {\n  kubeconfig = \"/etc/skillbox/kubeconfig\"\n  namespace = \"agents-1\"\n}\n",
			want: runtime.Settings{"kubeconfig": "/etc/skillbox/kubeconfig", "namespace": "agents-1", "state_dir": "/run/skillbox/kubernetes"},
		},
		{
			name: "relative kubeconfig",
			src:  "runtime \"kubernetes\" {\n  kubeconfig = \"kube/config\"\n}\n",
			want: runtime.Settings{"kubeconfig": "/etc/skillbox/kube/config", "namespace": "skillbox", "state_dir": "/run/skillbox/kubernetes"},
		},
		{
			name: "egress",
			src:  "runtime \"kubernetes\" {\n  egress_address = \"10.224.0.2\"\n  egress_netns = \"/proc/1/ns/net\"\n  data_path = \"agent\"\n  agent_binary = \"/usr/bin/skillbox\"\n}\n",
			want: runtime.Settings{"egress_address": "10.224.0.2", "egress_netns": "/proc/1/ns/net", "data_path": "agent", "agent_binary": "/usr/bin/skillbox", "namespace": "skillbox", "state_dir": "/run/skillbox/kubernetes"},
		},
		{name: "egress_address on containerd", src: "runtime \"containerd\" {\n  egress_address = \"10.0.0.1\"\n}\n", err: `not used by runtime "containerd" (only by kubernetes)`},
		{
			name: "registry",
			src:  "runtime \"kubernetes\" {\n  registry = \"127.0.0.1:5000/skillbox\"\n}\n",
			want: runtime.Settings{"registry": "127.0.0.1:5000/skillbox", "namespace": "skillbox", "state_dir": "/run/skillbox/kubernetes"},
		},
		{name: "registry on containerd", src: "runtime \"containerd\" {\n  registry = \"r:1/x\"\n}\n", err: `not used by runtime "containerd" (only by kubernetes)`},
		{name: "uppercase namespace", src: "runtime \"kubernetes\" {\n  namespace = \"Agents\"\n}\n", err: `invalid namespace "Agents"`},
		{name: "empty kubeconfig", src: "runtime \"kubernetes\" {\n  kubeconfig = \"\"\n}\n", err: "must not be empty"},
		{name: "binary", src: "runtime \"kubernetes\" {\n  binary = \"runsc\"\n}\n", err: `not used by runtime "kubernetes"`},
		{name: "handler", src: "runtime \"kubernetes\" {\n  handler = \"io.containerd.runsc.v1\"\n}\n", err: `not used by runtime "kubernetes"`},
		{name: "kubeconfig on containerd", src: "runtime \"containerd\" {\n  kubeconfig = \"/k\"\n}\n", err: `not used by runtime "containerd" (only by kubernetes)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.src), "/etc/skillbox/k.hcl")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.RuntimeOptions("kubernetes").Settings; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("settings %v, want %v", got, tc.want)
			}
		})
	}
}

// TestKubernetesFixture: testdata/kubernetes.hcl, a daemon on a cluster.
func TestKubernetesFixture(t *testing.T) {
	file, err := filepath.Abs(filepath.Join("testdata", "kubernetes.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if c.Daemon.Runtime != "kubernetes" {
		t.Errorf("daemon.runtime %q", c.Daemon.Runtime)
	}
	want := runtime.Settings{"kubeconfig": filepath.Join(filepath.Dir(file), "kube", "config"), "namespace": "skillbox-runs", "state_dir": "/var/lib/skillbox/kubernetes"}
	if got := c.RuntimeOptions(c.Daemon.Runtime).Settings; !reflect.DeepEqual(got, want) {
		t.Errorf("settings %v, want %v", got, want)
	}
}

// The workspace budgets per uid and in total are read next to the
// per-session quota; left out, they keep their defaults.
func TestWorkspaceBudgets(t *testing.T) {
	for _, tc := range []struct {
		name, src            string
		quota, perUID, total int64
	}{
		{"defaults", `daemon {}`, 1 << 30, 4 << 30, 16 << 30},
		{"all set", `daemon {
  workspace_quota         = "64MiB"
  workspace_quota_per_uid = "256MiB"
  workspace_quota_total   = 1073741824
}`, 64 << 20, 256 << 20, 1 << 30},
		{"per uid only", `daemon { workspace_quota_per_uid = "2GiB" }`, 1 << 30, 2 << 30, 16 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.src), "t.hcl")
			if err != nil {
				t.Fatal(err)
			}
			if d := c.Daemon; d.WorkspaceQuota != tc.quota || d.WorkspaceQuotaPerUID != tc.perUID || d.WorkspaceQuotaTotal != tc.total {
				t.Errorf("quota %d, per uid %d, total %d; want %d, %d, %d", d.WorkspaceQuota, d.WorkspaceQuotaPerUID, d.WorkspaceQuotaTotal, tc.quota, tc.perUID, tc.total)
			}
		})
	}
}
