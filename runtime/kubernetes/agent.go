package kubernetes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/agentauth"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/supervisor"
)

// The agent data path. With Options.DataPath DataPathAgent, a pod's
// container is skillbox's own supervisor (`skillbox supervise --listen`,
// AgentPath in the agent's image, agentimage.go), and a run's inputs, the
// job, its output and its outputs go over one mutual-TLS connection from
// the daemon to the pod's IP: the API server makes, watches and deletes
// the pod, and nothing else. A pod has a certificate of its own, issued by
// the daemon's CA (agentauth) for its namespace, name and UID once the API
// server has made it, and handed over in a Secret the pod owns (so it goes
// with the pod) and mounts for the agent alone (0400, root's: the job runs
// as another uid). The daemon checks that certificate before it sends a
// byte of a run; the agent accepts daemons of the same CA only. The job
// runs under the agent as runtime.ContainerUID in a user and network
// namespace of its own (supervisor.JobConfinement): it reaches neither the
// agent nor the pod network, so nothing in the pod can call the agent.

// Data paths of Options.DataPath.
const (
	DataPathExec  = "exec"  // the job and its files go over pods/exec
	DataPathAgent = "agent" // over the pod agent's mutual-TLS connection
)

const (
	// agentPort is where the agent listens in its pod.
	agentPort = 7443
	// agentTLSDir is where the pod's Secret is mounted for the agent.
	agentTLSDir = "/run/skillbox-agent"
	// volumeAgentTLS is that Secret's volume.
	volumeAgentTLS = "agent-tls"
	volumeSkill    = "skill"
	// caSecret holds the agents' CA, shared by the daemon's replicas.
	caSecret = "skillbox-agent-ca"
	// agentIdleTimeout is how long an agent with no daemon connected
	// lives: a pod whose daemon died ends by itself, and the sweep
	// deletes it.
	agentIdleTimeout = 2 * time.Minute
	// agentLeafLifetime is a pod certificate's lifetime; the daemon's
	// is renewed at half of it.
	agentLeafLifetime = 12 * time.Hour
	// agentDialTimeout bounds one dial and handshake with an agent.
	agentDialTimeout = 5 * time.Second
)

// agentCapabilities are what the agent needs, and all it has: to start
// the job as another uid in a user namespace of its own (SETUID, SETGID),
// to give it the workdir (CHOWN), and to read and write what the job
// leaves there (DAC_OVERRIDE). All are in Pod Security's "baseline".
var agentCapabilities = []corev1.Capability{"SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE"}

// agentCreds are the daemon's side of the agents' mutual TLS: the CA
// (loaded from, or made into, caSecret) and this daemon's certificate.
type agentCreds struct {
	mu       sync.Mutex
	ca       *agentauth.CA
	pool     []byte // the CA certificate, PEM
	daemon   tls.Certificate
	daemonAt time.Time // when daemon was issued
}

// credentials returns the CA and a current daemon certificate, loading
// or making the CA the first time.
func (k *Kubernetes) credentials(ctx context.Context, cs k8s.Interface) (*agentauth.CA, tls.Certificate, error) {
	c := &k.agentCreds
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ca == nil {
		ca, err := loadOrCreateCA(ctx, cs, k.namespace)
		if err != nil {
			return nil, tls.Certificate{}, err
		}
		c.ca, c.pool = ca, ca.CertPEM()
	}
	if c.daemon.Leaf == nil || time.Since(c.daemonAt) > agentLeafLifetime/2 {
		instance, _, err := k.labels()
		if err != nil {
			return nil, tls.Certificate{}, err
		}
		cert, err := c.ca.IssueDaemon(agentauth.DaemonIdentity{Instance: instance}, agentLeafLifetime)
		if err != nil {
			return nil, tls.Certificate{}, errkind.Errorf(runtime.ErrUnavailable, "the agents' daemon certificate: %w", err)
		}
		c.daemon, c.daemonAt = cert, time.Now()
	}
	return c.ca, c.daemon, nil
}

// loadOrCreateCA reads the agents' CA from its Secret in namespace, or
// makes it there; of replicas racing to make it, one wins and the others
// read its CA.
func loadOrCreateCA(ctx context.Context, cs k8s.Interface, namespace string) (*agentauth.CA, error) {
	secrets := cs.CoreV1().Secrets(namespace)
	for range 2 {
		s, err := secrets.Get(ctx, caSecret, metav1.GetOptions{})
		if err == nil {
			ca, err := agentauth.LoadCA(s.Data[agentauth.CACertFile], s.Data[agentauth.CAKeyFile])
			if err != nil {
				return nil, errkind.Errorf(runtime.ErrUnavailable, "the agents' CA in Secret %s/%s: %w: delete the Secret to have a new CA made (running pods then need replacing)", namespace, caSecret, err)
			}
			return ca, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, errkind.Errorf(runtime.ErrUnavailable, "read the agents' CA, Secret %s/%s: %w (the daemon's account needs get and create on secrets in its namespace)", namespace, caSecret, err)
		}
		ca, err := agentauth.NewCA(0)
		if err != nil {
			return nil, err
		}
		certPEM, keyPEM, err := ca.MarshalPEM()
		if err != nil {
			return nil, err
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: caSecret, Namespace: namespace, Labels: map[string]string{LabelManagedBy: ManagedBy}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{agentauth.CACertFile: certPEM, agentauth.CAKeyFile: keyPEM},
		}, metav1.CreateOptions{})
		if err == nil {
			return ca, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, errkind.Errorf(runtime.ErrUnavailable, "make the agents' CA, Secret %s/%s: %w (the daemon's account needs get and create on secrets in its namespace)", namespace, caSecret, err)
		}
		// Another replica made it first: read its.
	}
	return nil, errkind.Errorf(runtime.ErrUnavailable, "the agents' CA, Secret %s/%s: made and gone again", namespace, caSecret)
}

// agentSecretName is the name of the Secret of pod name's agent.
func agentSecretName(pod string) string { return pod + "-agent" }

// agentPod makes pod one whose container is the agent: the agent's image,
// its command, root with agentCapabilities only (the job it starts runs
// as runtime.ContainerUID), the Secret of its certificate, and a
// memory-backed skill directory the agent puts the skill's files into.
// python is how many python workers it keeps started.
func agentPod(pod *corev1.Pod, image string, python int, skillBytes int64) {
	root, no := int64(0), false
	pod.Spec.SecurityContext.RunAsNonRoot = &no
	pod.Spec.SecurityContext.RunAsUser = &root
	pod.Spec.SecurityContext.RunAsGroup = &root
	c := &pod.Spec.Containers[0]
	c.Image = image
	c.Command = []string{AgentPath, "supervise",
		"--listen", ":" + strconv.Itoa(agentPort),
		"--tls-cert", agentTLSDir + "/" + corev1.TLSCertKey,
		"--tls-key", agentTLSDir + "/" + corev1.TLSPrivateKeyKey,
		"--client-ca", agentTLSDir + "/" + agentauth.CACertFile,
		"--idle-timeout", agentIdleTimeout.String(),
		"--python-workers", strconv.Itoa(python),
		"--job-uid", strconv.Itoa(runtime.ContainerUID), "--job-gid", strconv.Itoa(runtime.ContainerGID), "--job-netns",
	}
	c.SecurityContext.RunAsNonRoot = &no
	c.SecurityContext.RunAsUser = &root
	c.SecurityContext.RunAsGroup = &root
	c.SecurityContext.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: agentCapabilities}
	c.Ports = []corev1.ContainerPort{{Name: "agent", ContainerPort: agentPort, Protocol: corev1.ProtocolTCP}}
	mode := int32(0o400)
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: volumeAgentTLS, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: agentSecretName(pod.Name), DefaultMode: &mode}}},
		memoryVolume(volumeSkill, skillBytes))
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: volumeAgentTLS, MountPath: agentTLSDir, ReadOnly: true},
		corev1.VolumeMount{Name: volumeSkill, MountPath: runtime.SkillMount})
}

// agentSecret makes the Secret of pod's agent: a key and a certificate
// for exactly this pod (namespace, name and UID, as the API server made
// it), and the CA the agent accepts daemons of. The pod owns it, so it
// goes with the pod.
func (k *Kubernetes) agentSecret(ctx context.Context, cs k8s.Interface, pod *corev1.Pod) (agentauth.PodIdentity, error) {
	ca, _, err := k.credentials(ctx, cs)
	if err != nil {
		return agentauth.PodIdentity{}, err
	}
	id := agentauth.PodIdentity{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
	keyPEM, csr, err := agentauth.NewKeyAndCSR()
	if err != nil {
		return id, err
	}
	certPEM, err := ca.SignPod(csr, id, agentLeafLifetime)
	if err != nil {
		return id, fmt.Errorf("the certificate of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	yes := true
	_, err = cs.CoreV1().Secrets(pod.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: agentSecretName(pod.Name), Namespace: pod.Namespace,
			Labels:          map[string]string{LabelManagedBy: ManagedBy},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: &yes}},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, agentauth.CACertFile: ca.CertPEM()},
	}, metav1.CreateOptions{})
	if err != nil {
		return id, errkind.Errorf(runtime.ErrUnavailable, "make the Secret of pod %s/%s's agent: %w (the daemon's account needs create on secrets in its namespace)", pod.Namespace, pod.Name, err)
	}
	return id, nil
}

// dialAgent connects to the agent of the pod id at ip, checking that it
// is that pod's (agentauth), and returns a client once it said it is
// ready. It tries again while the agent is not listening yet, until ctx
// ends.
func (k *Kubernetes) dialAgent(ctx context.Context, cs k8s.Interface, id agentauth.PodIdentity, ip netip.Addr, opts ...supervisor.ClientOption) (*supervisor.Client, error) {
	ca, daemon, err := k.credentials(ctx, cs)
	if err != nil {
		return nil, err
	}
	cfg := agentauth.DaemonClientConfig(daemon, ca.Pool(), id)
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(agentPort))
	wait := 20 * time.Millisecond
	for {
		c, err := k.dialAgentOnce(ctx, addr, cfg, opts...)
		if err == nil {
			return c, nil
		}
		var refused *net.OpError
		if !errors.As(err, &refused) || refused.Op != "dial" {
			// Not a listener missing yet: a handshake refused, or a
			// hostile answer.
			return nil, errkind.Errorf(runtime.ErrUnavailable, "the agent of pod %s/%s at %s: %w", id.Namespace, id.Name, addr, err)
		}
		select {
		case <-ctx.Done():
			return nil, errkind.Errorf(runtime.ErrUnavailable, "the agent of pod %s/%s at %s: %w (last: %v)", id.Namespace, id.Name, addr, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

func (k *Kubernetes) dialAgentOnce(ctx context.Context, addr string, cfg *tls.Config, opts ...supervisor.ClientOption) (*supervisor.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, agentDialTimeout)
	defer cancel()
	var nc net.Conn
	err := withNetNS(k.ko.EgressNetNS, func() (err error) {
		var d net.Dialer
		nc, err = d.DialContext(dctx, "tcp", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(dctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return supervisor.NewConnClient(ctx, tc, opts...)
}

// agentBinary is the binary the agent's image carries: the configured
// one, or this one.
func (k *Kubernetes) agentBinary() (string, error) {
	if k.ko.AgentBinary != "" {
		return k.ko.AgentBinary, nil
	}
	p, err := os.Executable()
	if err != nil {
		return "", errkind.Errorf(runtime.ErrUnavailable, "the agent's binary (this executable): %w", err)
	}
	return p, nil
}
