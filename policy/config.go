package policy

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/skillbox/skillbox/runtime/egress"

	"github.com/skillbox/skillbox/runtime"
)

// ToolMode says what a skill's own allowed-tools means (see DESIGN.md,
// tools.check). Entries are read as the hosts skills are written for mean
// them: the host's shell (Bash, Bash(python:*)) covers the skill's own
// scripts and code, Read covers skills.read, Write and Edit cover nothing
// of skillbox's (hostTools in hosttools.go, docs/CONFIG.md).
type ToolMode string

const (
	// ToolModeRestrict: while a skill that declares allowed-tools is active,
	// calls its list does not cover are denied, and the refusal quotes the
	// list and names what to add. The default.
	ToolModeRestrict ToolMode = "restrict"
	// ToolModePreapprove: the list does not restrict; every call keeps the
	// policy's outcome. A listed call never skips a confirmation the policy
	// asks for (a skill's text only narrows policy).
	ToolModePreapprove ToolMode = "preapprove"
)

// Runtime names the daemon can be configured with.
var runtimeNames = []string{"runsc", "runc", "containerd", "kubernetes"}

// Config is a decoded, validated skillbox.hcl. Every field holds its
// effective value (defaults filled in), so callers never re-apply defaults.
type Config struct {
	// File is the path the config was read from ("" for Default()).
	File string

	Daemon   Daemon
	Skills   Skills
	Runtimes map[string]*RuntimeConfig // always has runsc, runc, containerd and kubernetes
	Images   Images
	// Limits are the defaults for every run: runtime.DefaultLimits with the
	// file's top-level limits block laid over them.
	Limits    runtime.Limits
	LimitsPos Pos
	Audit     Audit
	Pool      Pool
	// Sessions is the sessions {} block: session sandboxes' limits.
	Sessions SessionConfig
	Egress   Egress
	// Secrets are the secret "NAME" {} blocks, in file order.
	Secrets []*Secret
	// Rules in file order. When the file declares no policy block at all,
	// one built-in rule ("default") allows skills.read, skills.run_script
	// and skills.run_code for every skill, so a minimal file (or none) is
	// usable.
	Rules []*Rule
	// Sources and Deps configure dependency layers (policy/packages.go).
	Sources PackageSources
	Deps    Dependencies
	// Agents are the agent "NAME" {} blocks by name: skills bound to an
	// agent, loaded into every session created for it.
	Agents map[string]*Agent
	// Etcd is the store "etcd" {} block, used when Daemon.Store is "etcd".
	Etcd EtcdStore

	hash   string
	passes *passCounter
}

// Daemon is the daemon {} block.
type Daemon struct {
	Socket            string
	SocketMode        fs.FileMode
	SocketGroup       string // "" leaves the group as created
	StateDir          string
	AuditDir          string // "" means no audit log (skillbox run); serve needs one
	Approvers         []string
	MaxConnections    int
	MaxConcurrentRuns int
	// Fair share: what one uid may hold of the daemon, and what is kept
	// back for approvers so a confirmation can always be answered (see
	// docs/SECURITY.md). Approvers are not bound by the per-uid caps.
	MaxConnectionsPerUID  int   // open connections of one uid
	MaxRunsPerUID         int   // runs of one uid in progress
	MaxQueuedRunsPerUID   int   // runs of one uid waiting for a slot
	MaxRequestBytesPerUID int64 // request bytes of one uid's calls in flight
	// WorkspaceQuota bounds what one session's workspace (the directory
	// the daemon keeps per session, under state_dir) may hold;
	// WorkspaceQuotaPerUID what all the session workspaces of one uid
	// hold together, and WorkspaceQuotaTotal what those of every uid do
	// (a uid may hold many sessions). Host workspaces do not count.
	WorkspaceQuota       int64
	WorkspaceQuotaPerUID int64
	WorkspaceQuotaTotal  int64
	ApproverConnections  int // connections only approvers may use
	ApproverRuns         int // run slots only approvers may use
	MaxActiveSkills      int
	RunQueueTimeout      time.Duration
	IdleTimeout          time.Duration // idle client connections are closed after this
	MaxLineBytes         int           // largest JSON-RPC request line
	ConfirmationTTL      time.Duration
	Runtime              string
	ToolMode             ToolMode
	Pos                  Pos
	// Replica names this daemon among replicas serving the same hosts; it
	// is in every audit record. Set, the audit chain is
	// <audit_dir>/<replica>/, so replicas can share one audit volume;
	// "" means the host name and the chain in audit_dir itself (one
	// machine).
	Replica string

	// Store is where sessions, confirmations and proposals live:
	// StoreBbolt (default) or StoreEtcd (Config.Etcd).
	Store string

	// Metrics is where the daemon serves its Prometheus metrics; the
	// zero value (the default) serves none. See MetricsAddress.
	Metrics MetricsAddress

	// Traces is the OTLP/HTTP collector the daemon sends its spans to;
	// the zero value (the default) records none. See TracesEndpoint.
	Traces TracesEndpoint
	// TracesSample is the share of calls traced (0 < s <= 1), when Traces
	// is set; the decoder makes it DefaultTracesSample when not given.
	TracesSample float64
}

// Skills is the skills {} block.
type Skills struct {
	Roots []string
	// AllowExtensions accepts frontmatter fields beyond the Agent Skills
	// spec (tags, requires, disable-model-invocation) in strict validation.
	AllowExtensions bool
	CatalogBudget   int   // characters of <available_skills> in the prompt
	MaxDepth        int   // directory levels scanned below each root
	MaxSkills       int   // skills indexed at most, over all roots
	MaxReadBytes    int64 // largest skills.read answer
	// CatalogBudgetTokens, when set, caps <available_skills> in estimated
	// tokens (skills.EstimateTokens) instead of characters.
	CatalogBudgetTokens int
	// LockFile is the lock of approved skill versions (skillbox skills
	// lock); default <state_dir>/skills.lock.
	LockFile string
	Pos      Pos
}

// RuntimeConfig is a runtime "NAME" {} block.
type RuntimeConfig struct {
	Name     string
	Binary   string
	StateDir string
	Platform string // runsc only; the pinned runsc's default is systrap, another binary's "" keeps its own
	Flags    []string
	Address  string // containerd only: its socket
	// Namespace is containerd's namespace, or the Kubernetes namespace
	// of the runs' pods.
	Namespace string
	// Kubeconfig is the kubernetes runtime's kubeconfig file; "" means
	// $KUBECONFIG, else the in-cluster service account.
	Kubeconfig string
	// EgressAddress and EgressNetNS are where the kubernetes runtime
	// serves its runs' egress proxies (kubernetes.Options).
	EgressAddress string
	EgressNetNS   string
	// Registry is the repository, HOST[:PORT]/REPO, the kubernetes
	// runtime pushes the images of its pods to; "" means none.
	Registry string
	// DataPath is how the kubernetes runtime reaches its pods' jobs
	// ("exec" or "agent"), and AgentBinary the static skillbox binary its
	// agent's image carries (kubernetes.Options).
	DataPath    string
	AgentBinary string
	// CPURequest is the share of its CPU limit a pod requests, "N%".
	CPURequest string
	// Handler is containerd's runtime handler (runtime.ContainerdHandlers);
	// Binary is then the OCI runtime its shim runs ("" for the handler's
	// own: the pinned runsc for gVisor's shim, runc for the runc v2 shim).
	Handler string
	Pos     Pos
}

// Images is the images {} block plus every image "NAME" {} block.
type Images struct {
	Dir         string
	RecipesDirs []string
	// BuildOnDemand lets the daemon build a missing image inside the first
	// run that needs it (minutes). Off by default: such a run fails fast
	// with "unavailable", naming `skillbox images build NAME`.
	BuildOnDemand bool
	Pos           Pos
	List          []*Image // sorted by name
}

// Image maps script extensions (and shebang interpreters) to an interpreter
// image and the argv prefix that runs a script in it.
type Image struct {
	Name        string
	Extensions  []string // lower case, with the dot
	Interpreter []string // argv prefix; the script path is appended
	Shebangs    []string // interpreter names in a #! line that pick this image
	Recipe      string   // the recipe it is built from; "" for a registry image
	// Ref is a registry reference the image is pulled from instead
	// (containerd runtime only); "" for an image skillbox builds.
	Ref string
	Pos Pos
}

// Rule names the image block, e.g. `image "python" (skillbox.hcl:20)`.
func (im *Image) Rule() string { return fmt.Sprintf("image %q (%s)", im.Name, im.Pos) }

// Pool is the pool {} block: the daemon's warm pool of pre-booted,
// single-use sandboxes. per_key = 0 turns it off.
type Pool struct {
	runtime.PoolConfig
	Pos Pos
}

// Audit is the audit {} block.
type Audit struct {
	RotateBytes        int64
	RotateAge          time.Duration // 0: no rotation by age
	CheckpointKey      string        // path of an Ed25519 private key; "" disables checkpoints
	CheckpointInterval time.Duration
	// MinFree is the free space the audit filesystem must keep: below it
	// new runs are refused (before the disk is full and every record
	// fails). 0 disables the check.
	MinFree int64
	// ReadsPerInterval successful skills.read calls (and their allow
	// decisions) of one uid are recorded one by one per AggregateInterval;
	// the rest are summed up in one record per uid and interval.
	ReadsPerInterval  int
	AggregateInterval time.Duration
	Pos               Pos
}

// Rule is a policy "NAME" {} block. Lists hold the patterns as written.
type Rule struct {
	Name    string
	Skills  []string // path.Match globs on skill names
	Tools   []string
	Deny    []string
	Confirm []string
	// Network is nil when the rule does not say; otherwise it votes.
	Network *bool
	// ScriptDirs, when set, are the directories of the skill (relative,
	// "/"-separated, e.g. "scripts") whose files may be run; nil: any file.
	ScriptDirs []string
	// Env lists the environment names (or NAME_* prefixes) callers may
	// pass to the skill's runs, beyond runtime.DefaultEnvAllow; matching
	// rules add up. runtime.EnvNeverAllowed names are refused in the file.
	Env []string
	// Egress are the destinations the rule lets runs reach through the
	// egress proxy (egress = [...]), each with Source naming this rule.
	Egress []egress.Rule
	// Limits set by the rule; zero fields are not set.
	Limits runtime.Limits
	// RequireLock: the skills this rule matches load and run only at a
	// version pinned in the lock file (nil: the rule does not say).
	RequireLock *bool
	// HookFailure is what a hook that fails or times out counts as:
	// "deny" (the default), "confirm" or "ignore"; "" when not set.
	HookFailure string
	// HookTimeout bounds each hook run (0: not set).
	HookTimeout time.Duration
	// Packages and BuildFromSource: see SkillPolicy.Packages.
	Packages        *RulePackages
	BuildFromSource *bool
	// Workspace is the mode the rule gives runs' workspaces (api.Workspace*
	// mode; "" when not set), for the host directories WorkspacePaths
	// match (none: every directory); WorkspaceDelete whether their
	// deletions are applied (nil: not set); WorkspaceExcludes the paths
	// neither copied in nor written back (nil: not set). See SkillPolicy.Workspace.
	Workspace         string
	WorkspacePaths    []string
	WorkspaceDelete   *bool
	WorkspaceExcludes []string
	// Isolation is IsolationRun or IsolationSession; "" when not set
	// (see SkillPolicy.Isolation).
	Isolation Isolation
	Pos       Pos

	tools, deny, confirm []toolPattern
}

// String names the rule the way decisions do: `policy "x" (skillbox.hcl:12)`.
func (r *Rule) String() string { return fmt.Sprintf("policy %q (%s)", r.Name, r.Pos) }

// Built-in defaults. They are conservative (network off, small limits) and
// match the paths the packaging creates.
func defaults() *Config {
	c := &Config{
		passes: &passCounter{},
		Daemon: Daemon{
			Socket:            "/run/skillbox/skillbox.sock",
			SocketMode:        0o660,
			StateDir:          "/var/lib/skillbox",
			Store:             StoreBbolt,
			TracesSample:      DefaultTracesSample,
			Approvers:         []string{"root"},
			MaxConnections:    64,
			MaxConcurrentRuns: 4,
			MaxActiveSkills:   8,
			RunQueueTimeout:   30 * time.Second,
			IdleTimeout:       30 * time.Minute,
			MaxLineBytes:      4 << 20,
			// Per uid: a quarter of the connections, half of the run
			// slots; one connection in eight and one run slot kept for
			// approvers.
			MaxConnectionsPerUID:  16,
			MaxRunsPerUID:         2,
			MaxQueuedRunsPerUID:   4,
			MaxRequestBytesPerUID: 16 << 20,
			WorkspaceQuota:        1 << 30,
			WorkspaceQuotaPerUID:  4 << 30,
			WorkspaceQuotaTotal:   16 << 30,
			ApproverConnections:   8,
			ApproverRuns:          1,
			ConfirmationTTL:       10 * time.Minute,
			Runtime:               "runsc",
			ToolMode:              ToolModeRestrict,
		},
		Etcd: EtcdStore{Prefix: "/skillbox"},
		Skills: Skills{
			Roots:         []string{"/etc/skillbox/skills"},
			CatalogBudget: 16000,
			MaxDepth:      4,
			MaxSkills:     50000,
			MaxReadBytes:  1 << 20,
		},
		Runtimes: map[string]*RuntimeConfig{},
		Limits:   runtime.DefaultLimits,
		Deps:     Dependencies{WhenNotReady: "wait", WaitTimeout: 10 * time.Minute, BuildOnLoad: true, MaxLayerBytes: 1 << 30},
		Pool:     Pool{PoolConfig: runtime.DefaultPoolConfig},
		Sessions: DefaultSessionConfig,
		Audit: Audit{
			RotateBytes:        64 << 20,
			CheckpointInterval: time.Hour,
			MinFree:            64 << 20,
			ReadsPerInterval:   20,
			AggregateInterval:  time.Minute,
		},
	}
	for _, n := range runtimeNames {
		rc := &RuntimeConfig{Name: n, StateDir: "/run/skillbox/" + n}
		switch n {
		case "containerd":
			rc.Address = "/run/containerd/containerd.sock"
			rc.Namespace = "skillbox"
			rc.Handler = runtime.ContainerdHandlerRunsc
		case "kubernetes":
			// The pods run on the cluster's nodes: no binary; the state
			// dir keeps the instance id its crash sweep goes by.
			rc.Namespace = "skillbox"
		default:
			rc.Binary = n
		}
		if n == "runsc" {
			// The pinned gVisor (hack/install-runsc.sh; runtime picks systrap for it); its
			// state dir is its version's own (see finishRuntimes).
			rc.Binary = runtime.PinnedRunscPath()
			rc.StateDir = ""
		}
		c.Runtimes[n] = rc
	}
	for _, im := range []*Image{
		{Name: "node", Extensions: []string{".js", ".mjs", ".cjs"}, Interpreter: []string{"node"}, Shebangs: []string{"node", "nodejs"}},
		{Name: "python", Extensions: []string{".py"}, Interpreter: []string{"python3"}, Shebangs: []string{"python3", "python"}},
		{Name: "shell", Extensions: []string{".sh", ".bash"}, Interpreter: []string{"bash"}, Shebangs: []string{"bash", "sh"}},
	} {
		im.Recipe = im.Name
		c.Images.List = append(c.Images.List, im)
	}
	return c
}

// builtinRule is used when a file declares no policy block.
func builtinRule() *Rule {
	r := &Rule{Name: "default", Skills: []string{"*"}, Tools: []string{"skills.read", "skills.run_script", "skills.run_code"}}
	for _, t := range r.Tools {
		p, _ := parseToolPattern(t)
		r.tools = append(r.tools, p)
	}
	return r
}

// Default is the configuration used when no file is given (skillbox run):
// the built-in defaults and the built-in "default" rule.
func Default() *Config {
	c, err := Parse(nil, "")
	if err != nil {
		panic("policy: built-in defaults do not validate: " + err.Error())
	}
	return c
}

// Load reads and parses a config file. Relative paths inside it are taken
// relative to the file's directory.
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(src, path)
}

// Parse decodes and validates src. filename is used in positions and to
// resolve relative paths; a name ending in ".json" selects HCL's JSON syntax.
// Every problem found is returned at once in a *ConfigError (wrapping ErrConfig).
func Parse(src []byte, filename string) (*Config, error) {
	c := defaults()
	c.File = filename
	sum := sha256.Sum256(src)
	c.hash = "sha256:" + hex.EncodeToString(sum[:])
	d := &decoder{file: filename, cfg: c}
	if filename != "" {
		d.dir = filepath.Dir(filename)
	}
	d.decodeFile(src)
	if len(d.problems) > 0 {
		e := &ConfigError{Problems: d.problems}
		e.sort()
		return nil, e
	}
	if len(c.Rules) == 0 {
		c.Rules = []*Rule{builtinRule()}
	}
	sort.Slice(c.Images.List, func(i, j int) bool { return c.Images.List[i].Name < c.Images.List[j].Name })
	if rc := c.Runtimes["runsc"]; rc.StateDir == "" {
		rc.StateDir = runtime.RunscStateDir(rc.Binary)
	}
	if c.Images.Dir == "" {
		c.Images.Dir = filepath.Join(c.Daemon.StateDir, "images")
	}
	if c.Skills.LockFile == "" {
		c.Skills.LockFile = filepath.Join(c.Daemon.StateDir, "skills.lock")
	}
	return c, nil
}

// Hash identifies the config for the audit log: "sha256:<hex>" of the file's
// bytes (of no bytes for Default()).
func (c *Config) Hash() string { return c.hash }

// Image returns the image block with this name, or nil.
func (c *Config) Image(name string) *Image {
	for _, im := range c.Images.List {
		if im.Name == name {
			return im
		}
	}
	return nil
}

// RuntimeOptions turns the runtime "NAME" block into options for
// runtime.New: its attributes as the backend's Settings (only those set),
// which the backend decodes into its own options.
func (c *Config) RuntimeOptions(name string) runtime.Options {
	rc := c.Runtimes[name]
	if rc == nil {
		return runtime.Options{Settings: runtime.Settings{}} // callers may add overrides
	}
	return runtime.Options{Settings: rc.Settings()}
}

// Settings are the block's attributes that are set, by their names in the
// file.
func (rc *RuntimeConfig) Settings() runtime.Settings {
	s := runtime.Settings{}
	for name, v := range map[string]string{"binary": rc.Binary, "state_dir": rc.StateDir, "platform": rc.Platform,
		"address": rc.Address, "namespace": rc.Namespace, "handler": rc.Handler, "kubeconfig": rc.Kubeconfig,
		"egress_address": rc.EgressAddress, "egress_netns": rc.EgressNetNS, "registry": rc.Registry,
		"data_path": rc.DataPath, "agent_binary": rc.AgentBinary, "cpu_request": rc.CPURequest} {
		if v != "" {
			s[name] = v
		}
	}
	if len(rc.Flags) > 0 {
		s["flags"] = append([]string(nil), rc.Flags...)
	}
	return s
}

// LoadCheckpointKey reads audit.checkpoint_key: a PEM "PRIVATE KEY" (PKCS#8,
// as `openssl genpkey -algorithm ed25519` writes), or a raw 32-byte seed or
// 64-byte key. It returns nil, nil when no key is configured.
func (a *Audit) LoadCheckpointKey() (ed25519.PrivateKey, error) {
	if a.CheckpointKey == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(a.CheckpointKey)
	if err != nil {
		return nil, fmt.Errorf("audit.checkpoint_key: %w", err)
	}
	if blk, _ := pem.Decode(raw); blk != nil {
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("audit.checkpoint_key %s: %v", a.CheckpointKey, err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("audit.checkpoint_key %s: a %T, not an Ed25519 key", a.CheckpointKey, k)
		}
		return ek, nil
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		return ed25519.PrivateKey(raw), nil
	}
	return nil, fmt.Errorf("audit.checkpoint_key %s: not a PEM PKCS#8 Ed25519 key nor a raw 32/64-byte key", a.CheckpointKey)
}
