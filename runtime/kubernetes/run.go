package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/runtime/process"
)

// A cold run: create the pod, wait until its holder runs, exec the job
// into it (argv, env and stdin over the API server's exec stream, stdout
// and stderr back at the job's caps), and delete the pod, whatever
// happened. A timeout, an output cap or the caller's cancel deletes the
// pod at once (grace 0), which ends the exec with it.

// Timing of a run's pod.
const (
	pollInterval = 200 * time.Millisecond
	// goneTimeout bounds the wait for a deleted pod to disappear.
	goneTimeout = 60 * time.Second
	// execEndTimeout bounds the wait for an exec stream to end after the
	// pod was deleted under it.
	execEndTimeout = 10 * time.Second
	// sandboxEndWait bounds the wait for the kubelet to report how a
	// pod ended: the sandbox died under the exec (the stream broke, or
	// runsc's exec exited 128), or skillbox ended it (endedBy). The
	// kubelet reports it at its next look at the pod, which a loaded node
	// makes late.
	sandboxEndWait = 30 * time.Second
)

// Run runs job in a fresh pod and deletes it: the lifecycle's five steps
// at once (lifecycle.go), the path a pooled pod takes too.
func (k *Kubernetes) Run(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
	return runtime.RunLifecycle(ctx, k, job)
}

// createError is the error of a pod the API server did not create.
func createError(id, namespace, name string, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return errkind.Errorf(runtime.ErrInvalidJob, "run %s: pod %s/%s exists already: run ids must be unique", id, namespace, name)
	}
	return fmt.Errorf("run %s: create pod %s/%s: %w", id, namespace, name, err)
}

// exec runs the delivered job (jobCommand) in the pod's container with
// the job's stdin and caps, stops it (deleting the pod) at its timeout, an
// output cap, an egress cap (egressOver closes; nil without egress) or the
// caller's cancel, and collects its outputs.
func (k *Kubernetes) exec(ctx context.Context, cs k8s.Interface, cfg *rest.Config, name string, job runtime.Job, version string, egressOver <-chan struct{}) (*runtime.Result, error) {
	lim := job.Limits()
	ex, err := k.executor(cs, cfg, name, jobCommand)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
	}
	caps := oci.NewCaptures(lim, job.Invocation)
	stdout, stderr, outW, errW := caps.Out, caps.Err, caps.Stdout, caps.Stderr

	execCtx, cancelExec := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelExec()
	exit := make(chan error, 1)
	start := time.Now()
	go func() {
		exit <- ex.StreamWithContext(execCtx, remotecommand.StreamOptions{Stdin: bytes.NewReader(job.Invocation.Stdin), Stdout: outW, Stderr: errW})
	}()
	// An egress cap ends the wait as a cancel would, and is told apart
	// from one after it (process.Ends takes a local backend's egress).
	awaitCtx, cancelAwait := context.WithCancel(ctx)
	defer cancelAwait()
	if egressOver != nil {
		go func() {
			select {
			case <-egressOver:
				cancelAwait()
			case <-awaitCtx.Done():
			}
		}()
	}
	execErr, exited, reason := process.AwaitEnd(awaitCtx, exit, process.Ends{
		Left: lim.Timeout, StdoutOver: stdout.Over, StderrOver: stderr.Over,
	})
	if reason == runtime.ReasonKilled && ctx.Err() == nil && isClosed(egressOver) {
		reason = runtime.ReasonEgressCap
	}
	// stopped says the job's processes were killed and the pod kept, so
	// its workdir can be read back.
	stopped := false
	if !exited && reason == runtime.ReasonTimeout {
		// As the local backends stop a timed-out job: TERM to its
		// processes first, and the kill grace for them to end.
		if err := k.signalJob(ctx, cs, cfg, name, termCommand); err != nil {
			k.log.Warn("TERM the timed-out job", "pod", name, "err", err)
		} else {
			select {
			case execErr = <-exit:
				stopped = true
			case <-time.After(k.opts.KillGraceOrDefault()):
			}
		}
	}
	if !exited {
		// A timeout, an output cap or a cancel stops the job (KILL to
		// what is left of it), not the pod, as the local backends stop
		// their sandbox and then read its workdir; the pod goes when that
		// fails.
		if err := k.stopJob(ctx, cs, cfg, name); err != nil {
			k.log.Warn("stop the job", "pod", name, "err", err)
		} else if !stopped {
			select {
			case execErr = <-exit:
				stopped = true
			case <-time.After(execEndTimeout):
			}
		}
	}
	if !exited && !stopped {
		// Kill: the pod goes at once, and the exec with it.
		if err := k.killPod(cs, name); err != nil {
			k.log.Warn("kill pod", "pod", name, "err", err)
		}
		select {
		case execErr = <-exit:
		case <-time.After(execEndTimeout):
			cancelExec()
			execErr = <-exit
		}
	}
	duration := time.Since(start)
	caps.Close()

	code := 0
	var exitErr utilexec.CodeExitError
	switch {
	case execErr == nil:
	case errors.As(execErr, &exitErr):
		code = exitErr.Code
	case !exited:
		code = 128 + 9 // the pod was deleted under the job
	default:
		// The stream broke without an exit status: the pod ended under
		// the job (its deadline, its memory limit, an eviction) or the
		// connection failed.
		end := k.podEnd(cs, name, sandboxEndWait)
		if r := end.reason(); r != "" {
			reason, code = r, 128+9
			break
		}
		if end.phase != "" {
			return nil, fmt.Errorf("run %s: pod %s ended under the job (%s): %w", job.Sandbox.ID, name, end, execErr)
		}
		return nil, fmt.Errorf("run %s: exec into pod %s: %w", job.Sandbox.ID, name, execErr)
	}
	if reason == runtime.ReasonExit && code == 128 {
		// The sandbox died under the exec (runsc's exec exits 128 then):
		// by the kubelet at the pod's deadline before skillbox's timer
		// fired, or by the kernel at the memory limit? The kubelet will
		// say how.
		if r := k.podEnd(cs, name, sandboxEndWait).reason(); r != "" {
			reason, code = r, 128+9 // the sandbox was killed
		}
	}
	res := &runtime.Result{Duration: duration, Summary: outcome.Summary{
		ExitCode: code, Signal: process.ExitSignal(code), Reason: reason,
		Runtime: Name, RuntimeVersion: version, LimitsEnforcedBy: enforcement(),
	}}
	caps.Fill(res)
	if reason == runtime.ReasonExit && (isClosed(stdout.Over) || isClosed(stderr.Over)) {
		// As the local backends say it: a job that went over an output
		// cap and ended before it was stopped is the same run.
		reason = runtime.ReasonOutputCap
		res.Reason = reason
	}
	switch {
	case exited && (reason == runtime.ReasonExit || reason == runtime.ReasonOutputCap):
		// What the job left running goes before its workdir is read.
		if err := k.stopJob(ctx, cs, cfg, name); err != nil {
			k.log.Warn("stop the job's leftover processes", "pod", name, "err", err)
		}
		fallthrough
	case stopped:
		// A cancelled run's outputs are read too, as the local backends
		// read them; collectTimeout bounds it.
		k.collect(context.WithoutCancel(ctx), cs, cfg, name, job).Apply(res)
	default:
		res.OutputsSkipped = []string{fmt.Sprintf("outputs not collected: the run ended (%s) with its pod, and the pod's workdir with it", reason)}
	}
	if exited && res.Reason == runtime.ReasonExit && code > 128 {
		// Killed (128+n) with the sandbox alive: by the job itself, or by
		// the node's kernel at the pod's memory limit (the OOM killer may
		// pick gVisor's process that maps the job's memory, and the
		// sandbox then kills the job and lives on), or by the kubelet at
		// the pod's deadline? The exit status cannot tell: end the pod,
		// its outputs read, and take the kubelet's word on how its
		// container ended.
		if r := k.endedBy(ctx, cs, cfg, name); r != "" {
			res.Reason = r
			res.ExitCode = 128 + 9
			res.Signal = process.ExitSignal(res.ExitCode)
		}
	}
	k.log.Debug("run finished", "id", job.Sandbox.ID, "pod", name, "reason", reason, "exit_code", code, "duration", duration)
	return res, nil
}

// stopCommand kills every process of the pod's user in the container
// but its init (the holder, which keeps the pod and its workdir) and
// itself: kill(-1) spares both. termCommand sends them TERM, a timed-out
// job's notice before its kill grace.
var (
	stopCommand = []string{"sh", "-c", "kill -9 -1"}
	termCommand = []string{"sh", "-c", "kill -TERM -1"}
)

// endCommand ends the pod's holder (holderCommand), and the pod with it.
var endCommand = []string{"sh", "-c", "kill -USR1 1"}

// endedBy ends the pod and returns the reason the kubelet gives for its
// ending (podEnding.reason): oom when containerd saw the container's
// cgroup OOM-kill, timeout at the pod's deadline, killed when it was
// deleted; "" for none, or when the kubelet did not report in time.
func (k *Kubernetes) endedBy(ctx context.Context, cs k8s.Interface, cfg *rest.Config, name string) runtime.Reason {
	if err := k.signalJob(ctx, cs, cfg, name, endCommand); err != nil {
		// The pod may have ended already: the kubelet says how.
		k.log.Debug("end the pod's holder", "pod", name, "err", err)
	}
	return k.podEnd(cs, name, sandboxEndWait).reason()
}

// stopTimeout bounds the exec of stopCommand.
const stopTimeout = 10 * time.Second

// stopJob kills the job's processes in the pod, and what they left
// running, keeping the pod. kill's own status (none left to kill) does
// not matter.
func (k *Kubernetes) stopJob(ctx context.Context, cs k8s.Interface, cfg *rest.Config, name string) error {
	return k.signalJob(ctx, cs, cfg, name, stopCommand)
}

// signalJob execs argv, a kill of the job's processes (stopCommand,
// termCommand), into the pod.
func (k *Kubernetes) signalJob(ctx context.Context, cs k8s.Interface, cfg *rest.Config, name string, argv []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	ex, err := k.executor(cs, cfg, name, argv)
	if err != nil {
		return err
	}
	var errOut noteBuffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: &errOut, Stderr: &errOut})
	var exitErr utilexec.CodeExitError
	if err != nil && !errors.As(err, &exitErr) {
		return fmt.Errorf("exec %q into pod %s/%s: %w: %s", argv, k.namespace, name, err, errOut.String())
	}
	return nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// traceExec, when set (by tests), sees the URL of every exec: what the
// API server's audit log and proxies see of it.
var traceExec func(*url.URL)

// executor is an exec of argv into the pod's container, with stdin,
// stdout and stderr. argv is in the exec's URL: never a job's data.
func (k *Kubernetes) executor(cs k8s.Interface, cfg *rest.Config, name string, argv []string) (remotecommand.Executor, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(k.namespace).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: argv, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	if traceExec != nil {
		traceExec(req.URL())
	}
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "exec into pod %s/%s: %w", k.namespace, name, err)
	}
	return ex, nil
}

// enforcement names what holds each limit of this backend's runs: the
// pod's cgroup (the kubelet's, from its resources) memory and CPUs, the
// kubelet's memory-backed emptyDirs /work and /tmp. Pids have no per-pod
// setting in a PodSpec (the kubelet's podPidsLimit is the node's): none.
func enforcement() map[string]string {
	return runtime.Enforcement(map[string]string{
		"memory": runtime.EnforcedByCgroup, "cpus": runtime.EnforcedByCgroup,
		"workdir": runtime.EnforcedByTmpfs, "tmp": runtime.EnforcedByTmpfs,
	})
}

// waitRunning waits until the pod's container runs, or fails naming why
// it does not: a missing RuntimeClass, an unschedulable pod (with the
// scheduler's message), an image that cannot be pulled (with the image),
// a pod that failed, or the boot timeout. It returns the running pod.
func (k *Kubernetes) waitRunning(ctx context.Context, cs k8s.Interface, name string, timeout time.Duration) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		p, err := cs.CoreV1().Pods(k.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return nil, k.bootTimeout(cs, name, timeout, ctx.Err())
			}
			return nil, fmt.Errorf("pod %s/%s: %w", k.namespace, name, err)
		}
		if err := podFailure(p); err != nil {
			return nil, err
		}
		if p.Status.Phase == corev1.PodRunning {
			for _, s := range p.Status.ContainerStatuses {
				if s.Name == containerName && s.State.Running != nil {
					return p, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, k.bootTimeout(cs, name, timeout, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

func (k *Kubernetes) bootTimeout(cs k8s.Interface, name string, timeout time.Duration, err error) error {
	return fmt.Errorf("pod %s/%s not running after %s%s: %w", k.namespace, name, timeout, k.describe(cs, name), err)
}

// podFailure is the error of a pod that will not run its container, or nil.
func podFailure(p *corev1.Pod) error {
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return errkind.Errorf(runtime.ErrUnavailable, "pod %s/%s ended before the job ran: %s %s", p.Namespace, p.Name, p.Status.Reason, p.Status.Message)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return errkind.Errorf(runtime.ErrUnavailable, "pod %s/%s cannot be scheduled: %s", p.Namespace, p.Name, c.Message)
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		w := s.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName":
			return errkind.Errorf(runtime.ErrUnavailable, "image %s is not on the node and cannot be pulled (%s: %s): set runtime %q { registry = \"HOST:PORT/REPO\" } to a registry the nodes pull from (skillbox pushes the image there), or import the image into the nodes by digest (hack/kube.sh import)", s.Image, w.Reason, w.Message, Name)
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			return errkind.Errorf(runtime.ErrUnavailable, "pod %s/%s: container cannot start (%s): %s", p.Namespace, p.Name, w.Reason, w.Message)
		}
	}
	return nil
}

// podEnding is how a pod ended, as the kubelet reported it.
type podEnding struct {
	phase, why, message string // the pod's phase, reason and message
	container           string // its container's termination reason
	// deleted says the pod was deleted (it is being deleted, or gone)
	// while the run still needed it: by someone other than the run.
	deleted bool
}

func (e podEnding) String() string {
	if e.deleted {
		return "deleted"
	}
	return strings.Join(strings.Fields(fmt.Sprintf("%s %s %s container: %s", e.phase, e.why, e.message, e.container)), " ")
}

// reason is the run's reason the ending gives: the pod's deadline
// (timeout), its memory limit (oom), its deletion from outside (killed);
// "" for any other.
func (e podEnding) reason() runtime.Reason {
	switch {
	case e.deleted:
		return runtime.ReasonKilled
	case e.why == "DeadlineExceeded":
		return runtime.ReasonTimeout
	case e.container == "OOMKilled":
		return runtime.ReasonOOM
	}
	return ""
}

// podEnd says how the pod ended once the kubelet has reported it (which
// may lag the end of an exec by a moment: wait), or that it was
// deleted; its phase is "" if the kubelet has not reported an end.
func (k *Kubernetes) podEnd(cs k8s.Interface, name string, wait time.Duration) podEnding {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		p, err := cs.CoreV1().Pods(k.namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return podEnding{deleted: true}
		}
		if err != nil {
			return podEnding{}
		}
		if p.DeletionTimestamp != nil {
			return podEnding{deleted: true}
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			e := podEnding{phase: string(p.Status.Phase), why: p.Status.Reason, message: p.Status.Message}
			for _, c := range p.Status.ContainerStatuses {
				if c.Name == containerName && c.State.Terminated != nil {
					e.container = c.State.Terminated.Reason
				}
			}
			return e
		}
		select {
		case <-ctx.Done():
			return podEnding{}
		case <-time.After(pollInterval):
		}
	}
}

// describe is what a failed wait reports: the pod's conditions, its
// container's state and its events (FailedCreatePodSandBox of a broken
// runtime handler, a RuntimeClass the node lacks, …).
func (k *Kubernetes) describe(cs k8s.Interface, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if p, err := cs.CoreV1().Pods(k.namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&b, "; phase %s", p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, "; %s=%s %s %s", c.Type, c.Status, c.Reason, c.Message)
			}
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil {
				fmt.Fprintf(&b, "; container waiting: %s %s", w.Reason, w.Message)
			}
		}
	}
	events, err := cs.CoreV1().Events(k.namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err == nil {
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning {
				fmt.Fprintf(&b, "; event %s: %s", e.Reason, e.Message)
			}
		}
	}
	return b.String()
}

// killPod deletes the pod at once (grace 0): the kubelet stops its
// containers, and the exec streams into it end.
func (k *Kubernetes) killPod(cs k8s.Interface, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	err := cs.CoreV1().Pods(k.namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", k.namespace, name, err)
	}
	return nil
}

// deletePod deletes the pod (grace 0) and waits until it is gone.
func (k *Kubernetes) deletePod(ctx context.Context, cs k8s.Interface, name string) error {
	if err := k.killPod(cs, name); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, goneTimeout)
	defer cancel()
	for {
		_, err := cs.CoreV1().Pods(k.namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s/%s still there %s after its deletion", k.namespace, name, goneTimeout)
		case <-time.After(pollInterval):
		}
	}
}
