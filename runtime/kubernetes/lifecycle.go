package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/agentauth"
	"github.com/skillbox/skillbox/runtime/supervisor"
)

// The lifecycle on a cluster: Create makes the pod, Start waits until its
// holder runs, Deliver sets the pod's deadline to the job's timeout and
// execs the job into it, Wait collects the result, Destroy deletes the
// pod. A cold run goes through all five at once (runtime.RunLifecycle);
// the pool stops after Start, so a claim of a Ready pod never waits on the
// scheduler or the image. Either way a pod runs exactly one job.
//
// A pod made for the pool (any boot but BootCold) has no deadline until its
// job arrives: it may wait in the pool for as long as the pool keeps it
// (PoolConfig.IdleTimeout), and the pool destroys it then. If skillbox dies
// first, its sweep deletes it. Python-booted sandboxes are exec'd like
// BootExec ones: the pod holds no supervisor of its own.

var _ runtime.Lifecycle = (*Kubernetes)(nil)

// podSandbox is one run's pod.
type podSandbox struct {
	k    *Kubernetes
	spec runtime.SandboxSpec
	name string
	uid  types.UID // the pod's, for its NetworkPolicy's owner reference
	// running is the pod as Start saw it run (its IP: egress.go).
	running *corev1.Pod
	cs      k8s.Interface
	cfg     *rest.Config
	version string
	created time.Time
	// deadline is the pod's activeDeadlineSeconds as made; 0 for none.
	deadline int64

	// eg is the job's egress proxy (egress.go); nil without egress.
	eg *podEgress

	// job is the delivered job; done closes when its exec ended.
	job  runtime.Job
	done chan struct{}
	res  *runtime.Result
	err  error

	// agentID is the pod's identity and client the connection to its
	// agent, with the agent data path (agent.go); zero and nil without.
	agentID agentauth.PodIdentity
	client  *supervisor.Client
	// steps times a run's parts over the agent, for its debug log.
	steps struct {
		start time.Time
		put   time.Duration
	}

	destroyOnce sync.Once
	destroyErr  error
}

var _ runtime.Sandbox = (*podSandbox)(nil)

// Create makes the pod of spec; it does not wait for it to run (Start).
func (k *Kubernetes) Create(ctx context.Context, spec runtime.SandboxSpec) (runtime.Sandbox, error) {
	if spec.Egress != nil {
		// Refused before a pod is made for nothing.
		if err := k.canEgress(); err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
		}
	}
	if spec.RootFS == "" {
		// The node runs the image by digest; the host's unpacked copy
		// (RootFS) is not used here, and need not exist.
		spec.RootFS = "/"
	}
	spec, err := runtime.CheckSpec(ctx, spec, runtime.LifecycleBoots...)
	if err != nil {
		return nil, err
	}
	// The pod is made from the sandbox's part of a job: a placeholder
	// argv stands for the job to come, which Deliver validates.
	shell := spec.ProcessJob("true")
	agent := k.usesAgent(spec)
	var image string
	if agent {
		image, err = k.agentImage(ctx, shell)
	} else {
		image, err = k.nodeImage(ctx, shell)
	}
	if err != nil {
		return nil, err
	}
	pod, err := podSpec(shell, k.namespace, image)
	if err != nil {
		return nil, err
	}
	if agent {
		agentPod(pod, image, pythonWorkers(spec), maxSkillBytes)
	}
	requestCPU(pod, k.ko.CPURequestPercent)
	if err := k.ownPod(pod); err != nil {
		return nil, err
	}
	var deadline int64
	if spec.Boot == runtime.BootCold {
		deadline = *pod.Spec.ActiveDeadlineSeconds
	} else {
		pod.Spec.ActiveDeadlineSeconds = nil
	}
	version, err := k.Version(ctx)
	if err != nil {
		return nil, err
	}
	cs, cfg, err := k.connect()
	if err != nil {
		return nil, err
	}
	sb := &podSandbox{k: k, spec: spec, name: pod.Name, cs: cs, cfg: cfg, version: version, deadline: deadline, created: time.Now()}
	made, err := cs.CoreV1().Pods(k.namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, createError(spec.ID, k.namespace, pod.Name, err)
	}
	sb.uid = made.UID
	k.track(sb)
	if agent {
		if sb.agentID, err = k.agentSecret(ctx, cs, made); err != nil {
			_ = sb.Destroy(ctx)
			return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
		}
	}
	k.log.Debug("pod created", "id", spec.ID, "pod", pod.Name, "image", pod.Spec.Containers[0].Image, "boot", spec.Boot)
	return sb, nil
}

func (s *podSandbox) ID() string { return s.spec.ID }

// Start waits until the pod's holder runs, or fails naming why it does not
// (see waitRunning).
func (s *podSandbox) Start(ctx context.Context) error {
	p, err := s.k.waitRunning(ctx, s.cs, s.name, runtime.BootTimeout)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("sandbox %s: %w", s.spec.ID, ctx.Err())
		}
		return fmt.Errorf("sandbox %s: %w", s.spec.ID, err)
	}
	s.running = p
	if s.agentID.Name != "" {
		if err := s.startAgent(ctx); err != nil {
			return fmt.Errorf("sandbox %s: %w", s.spec.ID, err)
		}
	}
	return nil
}

// Deliver checks inv against the sandbox, starts the job's egress proxy
// and makes its NetworkPolicy (a job with egress), tightens the pod's
// deadline to the job's timeout from now, and starts the job's exec.
func (s *podSandbox) Deliver(ctx context.Context, inv runtime.Invocation) error {
	if s.done != nil {
		return fmt.Errorf("sandbox %s has had its job already", s.spec.ID)
	}
	job, err := runtime.Accept(ctx, s.spec, inv)
	if err != nil {
		return err
	}
	if err := unsupported(job); err != nil {
		return err
	}
	if s.client != nil {
		return s.deliverAgent(ctx, job)
	}
	var egressEnv []string
	if job.Sandbox.Egress != nil {
		// The pod has run since Start: it has its IP, which the proxy
		// takes connections from only.
		if s.running == nil {
			return fmt.Errorf("run %s: sandbox %s was not started", job.Sandbox.ID, s.spec.ID)
		}
		ip, err := s.k.podIP(s.running)
		if err != nil {
			return fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
		}
		if s.eg, err = s.k.startEgress(ctx, s.cs, s.name, s.uid, ip, job); err != nil {
			return fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
		}
		egressEnv = s.eg.Env()
	}
	frame, err := jobFrame(job, egressEnv)
	if err != nil {
		return err
	}
	if err := s.k.deliver(ctx, s.cs, s.cfg, s.name, job, frame); err != nil {
		return fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
	}
	// The pod started after it was created: time.Since(created) bounds
	// how long it has been up, without trusting the node's clock. The
	// job's time starts now, after its inputs are in; endSlack leaves time
	// to stop it and read its outputs back.
	up, timeout := time.Since(s.created), job.Limits().Timeout+endSlack
	deadline := deadlineSeconds(up + timeout)
	if s.deadline > 0 {
		deadline = runDeadline(up, timeout, s.deadline)
	}
	patch := fmt.Appendf(nil, `{"spec":{"activeDeadlineSeconds":%d}}`, deadline)
	if _, err := s.cs.CoreV1().Pods(s.k.namespace).Patch(ctx, s.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("run %s: set the deadline of pod %s/%s to %d s: %w", job.Sandbox.ID, s.k.namespace, s.name, deadline, err)
	}
	s.deadline = deadline
	s.job, s.done = job, make(chan struct{})
	go func() {
		defer close(s.done)
		var over <-chan struct{}
		if s.eg != nil {
			over = s.eg.Over()
		}
		s.res, s.err = s.k.exec(ctx, s.cs, s.cfg, s.name, job, s.version, over)
		finishEgress(s.eg, s.res)
		if s.res != nil {
			s.res.Warm = s.spec.Boot != runtime.BootCold
		}
	}()
	return nil
}

// Wait waits for the job's exec to end. The exec itself stops the job at
// its timeout, its output caps and the end of the Deliver context, and then
// reads its outputs back (the pool and RunLifecycle pass one context to
// both): a pod is not deleted under the collection.
func (s *podSandbox) Wait(ctx context.Context) (*runtime.Result, error) {
	if s.done == nil {
		return nil, fmt.Errorf("sandbox %s: no job delivered", s.spec.ID)
	}
	<-s.done
	return s.res, s.err
}

// Destroy stops the job's egress proxy, deletes the pod (grace 0) and its
// NetworkPolicy, and waits until the pod is gone; it is safe to call
// twice.
func (s *podSandbox) Destroy(ctx context.Context) error {
	s.destroyOnce.Do(func() {
		ctx := context.WithoutCancel(ctx)
		if s.client != nil {
			_ = s.client.Close()
		}
		if s.eg != nil {
			s.eg.finish()
		}
		s.destroyErr = s.k.deletePod(ctx, s.cs, s.name)
		if s.spec.Egress != nil {
			// The garbage collector would remove it with the pod;
			// deleting it now leaves nothing behind the run.
			s.destroyErr = errors.Join(s.destroyErr, s.k.deletePolicy(ctx, s.cs, s.name))
		}
		if s.destroyErr == nil {
			s.k.untrack(s)
		}
	})
	return s.destroyErr
}

// track and untrack keep the pods this process made and has not deleted,
// for Close.
func (k *Kubernetes) track(s *podSandbox) {
	k.liveMu.Lock()
	defer k.liveMu.Unlock()
	if k.live == nil {
		k.live = map[*podSandbox]struct{}{}
	}
	k.live[s] = struct{}{}
}

func (k *Kubernetes) untrack(s *podSandbox) {
	k.liveMu.Lock()
	defer k.liveMu.Unlock()
	delete(k.live, s)
}

// Close deletes every pod this process made that is still there.
func (k *Kubernetes) Close(ctx context.Context) error {
	k.liveMu.Lock()
	live := make([]*podSandbox, 0, len(k.live))
	for s := range k.live {
		live = append(live, s)
	}
	k.liveMu.Unlock()
	var first error
	for _, s := range live {
		if err := s.Destroy(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
