package kubernetes

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Name is the backend's name in runtime.New and the config.
const Name = "kubernetes"

// Defaults.
const (
	// DefaultNamespace is where the runs' pods live unless the config
	// names another one.
	DefaultNamespace = "skillbox"
	// RuntimeClass is the RuntimeClass every pod runs under: a cluster
	// without it runs nothing (never a pod without gVisor).
	RuntimeClass = "gvisor"
)

// Options are the kubernetes backend's own options
// (runtime.Options.Backend; from the config file, its runtime "kubernetes"
// {} block). Zero values mean the defaults.
type Options struct {
	// Kubeconfig is the path of the kubeconfig file to use; "" means
	// $KUBECONFIG, else the in-cluster service account (a daemon running
	// as a pod).
	Kubeconfig string
	// Namespace is where the runs' pods are made; default DefaultNamespace.
	Namespace string
	// StateDir keeps this instance's id, which labels its pods so that its
	// crash sweep finds them (sweep.go); default DefaultStateDir.
	StateDir string
	// Registry is a repository, HOST[:PORT]/REPO, that skillbox pushes
	// the images its pods run to (REPO/NAME@DIGEST) and the nodes pull
	// from; "" means none: the images must be on the nodes already.
	Registry string
	// EgressAddress is the IP address the runs' pods reach this daemon at,
	// where it serves each run with egress rules an egress proxy of its own
	// (egress.go); "" means $SKILLBOX_EGRESS_ADDRESS (a daemon pod sets it
	// to its own IP from the downward API), and without either, a job
	// with egress is refused.
	EgressAddress string
	// EgressNetNS is the path of a network namespace (/proc/PID/ns/net,
	// /run/netns/NAME) to open the proxies' listeners in, for a daemon
	// outside the cluster's network whose pods reach EgressAddress only
	// there (the test cluster's node); "" means the daemon's own.
	EgressNetNS string
	// DataPath is how a run's job and files reach its pod: DataPathExec
	// (pods/exec through the API server) or DataPathAgent (the pod's
	// agent at its IP, over mutual TLS; agent.go); "" means DataPathExec.
	// EgressNetNS is also where the agents are dialled from.
	DataPath string
	// AgentBinary is the static skillbox binary the agent's image
	// carries; "" means this executable.
	AgentBinary string
	// CPURequestPercent is the share of its CPU limit a pod requests, 1
	// to 100; 0 means 100. Below 100 a node holds more pods, warm ones
	// above all, which spend nearly nothing while they wait; the pods of
	// busy runs then share the node's cores beyond what was reserved
	// (docs/SCALING.md, "Cost model").
	CPURequestPercent int
}

// EnvEgressAddress is read when Options.EgressAddress is "".
const EnvEgressAddress = "SKILLBOX_EGRESS_ADDRESS"

// DecodeOptions takes Options from a runtime "kubernetes" block's
// settings: kubeconfig, namespace, state_dir, registry, egress_address,
// egress_netns, data_path and agent_binary.
func DecodeOptions(s runtime.Settings) (Options, error) {
	var o Options
	var cpuRequest string
	err := s.Decode(map[string]any{"kubeconfig": &o.Kubeconfig, "namespace": &o.Namespace, "state_dir": &o.StateDir, "registry": &o.Registry,
		"egress_address": &o.EgressAddress, "egress_netns": &o.EgressNetNS, "data_path": &o.DataPath, "agent_binary": &o.AgentBinary,
		"cpu_request": &cpuRequest})
	if err == nil && o.DataPath != "" && o.DataPath != DataPathExec && o.DataPath != DataPathAgent {
		err = fmt.Errorf("data_path = %q: use %q (pods/exec) or %q (the pod's agent over mutual TLS)", o.DataPath, DataPathExec, DataPathAgent)
	}
	if err == nil && cpuRequest != "" {
		o.CPURequestPercent, err = parseCPURequest(cpuRequest)
	}
	return o, err
}

// parseCPURequest reads cpu_request, "N%" of a pod's CPU limit.
func parseCPURequest(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || !strings.HasSuffix(s, "%") || n < 1 || n > 100 {
		return 0, fmt.Errorf("cpu_request = %q: want the share of a pod's CPU limit it requests, from \"1%%\" to \"100%%\"", s)
	}
	return n, nil
}

// Kubernetes runs jobs as Pods of RuntimeClass gvisor.
type Kubernetes struct {
	opts      runtime.Options
	ko        Options
	namespace string
	log       runtime.Logger
	artifacts *Artifacts
	registry  *registry // nil without Options.Registry
	// egressAddr is where pods reach the runs' egress proxies; invalid
	// (!IsValid) when none is configured: jobs with egress are refused.
	egressAddr netip.Addr

	mu     sync.Mutex
	cfg    *rest.Config
	client k8s.Interface

	verMu   sync.Mutex
	version string

	liveMu sync.Mutex
	live   map[*podSandbox]struct{} // pods made and not deleted (Close)

	own ownership // the labels of this instance's pods (sweep.go)

	// agentCreds are the agents' CA and this daemon's certificate
	// (agent.go), with DataPathAgent.
	agentCreds agentCreds
}

var _ runtime.Runtime = (*Kubernetes)(nil)

func init() {
	runtime.Register(Name, func(o runtime.Options) (runtime.Runtime, error) { return New(o) })
}

// New makes the backend. Nothing is dialled here: a missing kubeconfig, an
// unreachable API server or a missing RuntimeClass is reported by Version
// and Run (runtime.ErrUnavailable), so a daemon can start and say what to
// fix.
func New(opts runtime.Options) (*Kubernetes, error) {
	// opts.Rootless is not refused: the pods run on the cluster's nodes,
	// and nothing of a run is made on this host.
	ko, err := runtime.BackendOptions(Name, opts, DecodeOptions)
	if err != nil {
		return nil, err
	}
	k := &Kubernetes{opts: opts, ko: ko, namespace: ko.Namespace}
	if k.namespace == "" {
		k.namespace = DefaultNamespace
	}
	k.log = runtime.NamedLogger(opts.Logger, "runtime.kubernetes")
	// Derived images are kept beside the instance id: the rootless
	// stack gives an ordinary user a state dir of their own.
	k.artifacts = NewArtifacts(filepath.Join(k.stateDir(), "artifacts"))
	if ko.Registry != "" {
		repo, err := ParseRegistry(ko.Registry)
		if err != nil {
			return nil, fmt.Errorf("runtime %q: %w", Name, err)
		}
		k.registry = newRegistry(repo)
	}
	if k.egressAddr, err = egressAddress(ko); err != nil {
		return nil, fmt.Errorf("runtime %q: %w", Name, err)
	}
	return k, nil
}

func (k *Kubernetes) Name() string { return Name }

// Namespace is where the backend makes its pods.
func (k *Kubernetes) Namespace() string { return k.namespace }

// restConfig finds the cluster: the configured kubeconfig, $KUBECONFIG, or
// the in-cluster service account, in that order.
func (k *Kubernetes) restConfig() (*rest.Config, error) {
	path := k.ko.Kubeconfig
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, errkind.Errorf(runtime.ErrUnavailable, "no kubeconfig (%v): set runtime %q { kubeconfig = \"PATH\" } or $KUBECONFIG, or run skillbox in a pod with a service account", err, Name)
		}
		return cfg, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "kubeconfig %s: %w: set runtime %q { kubeconfig = \"PATH\" } to a cluster's kubeconfig (hack/kube.sh env prints the test cluster's)", path, err, Name)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// The client's rate limit towards the API server.
const (
	clientQPS   = 100
	clientBurst = 200
)

// connect makes the client once; a failure is not cached.
func (k *Kubernetes) connect() (k8s.Interface, *rest.Config, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.client != nil {
		return k.client, k.cfg, nil
	}
	cfg, err := k.restConfig()
	if err != nil {
		return nil, nil, err
	}
	// client-go's default rate (5 requests/s, bursts of 10) would queue a
	// busy daemon's runs behind each other on the client side: every run
	// costs about ten requests (create, status polls, patch, execs,
	// delete). The API server's own priority and fairness still applies.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = clientQPS, clientBurst
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, nil, errkind.Errorf(runtime.ErrUnavailable, "client for %s: %w", cfg.Host, err)
	}
	k.cfg, k.client = cfg, cs
	return cs, cfg, nil
}

// Version names the API server's version after checking that the cluster
// can run skillbox's pods: the RuntimeClass gvisor and the namespace exist.
func (k *Kubernetes) Version(ctx context.Context) (string, error) {
	k.verMu.Lock()
	defer k.verMu.Unlock()
	if k.version != "" {
		return k.version, nil
	}
	cs, cfg, err := k.connect()
	if err != nil {
		return "", err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return "", errkind.Errorf(runtime.ErrUnavailable, "kubernetes API server %s unreachable: %w", cfg.Host, err)
	}
	if err := k.checkCluster(ctx, cs); err != nil {
		return "", err
	}
	k.version = fmt.Sprintf("kubernetes %s, RuntimeClass %s", v.GitVersion, RuntimeClass)
	return k.version, nil
}

// checkCluster: the RuntimeClass and the namespace exist.
func (k *Kubernetes) checkCluster(ctx context.Context, cs k8s.Interface) error {
	if _, err := cs.NodeV1().RuntimeClasses().Get(ctx, RuntimeClass, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return errkind.Errorf(runtime.ErrUnavailable, "the cluster has no RuntimeClass %s, and skillbox runs no pod without gVisor: create it (handler: the nodes' CRI runtime handler for runsc)", RuntimeClass)
		}
		return errkind.Errorf(runtime.ErrUnavailable, "RuntimeClass %s: %w", RuntimeClass, err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, k.namespace, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return errkind.Errorf(runtime.ErrUnavailable, "namespace %s does not exist: create it (kubectl create namespace %s) or set runtime %q { namespace = \"…\" }", k.namespace, k.namespace, Name)
		}
		return errkind.Errorf(runtime.ErrUnavailable, "namespace %s: %w", k.namespace, err)
	}
	return nil
}
