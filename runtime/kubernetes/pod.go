package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// What a run's pod is: the confinement the local backends give a sandbox,
// said in a PodSpec, so that the API server, the scheduler and the kubelet
// hold it rather than skillbox. One pod per run, never reused.

// Labels and annotations on skillbox's pods.
const (
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	ManagedBy       = "skillbox"
	LabelRun        = "skillbox.io/run" // the pod's name (podName of the run id)
	AnnotationRunID = "skillbox.io/run-id"
	AnnotationImage = "skillbox.io/image" // the skillbox image name@digest
)

// The pod's container and volumes.
const (
	containerName = "run"
	volumeWork    = "work"
	volumeTmp     = "tmp"
	volumeFrame   = "frame" // frameDir, the job's frame
)

// holderSlack is how much longer than the pod's deadline the holder
// sleeps: the kubelet ends the pod at its deadline first; a holder that
// outlives it would hold nothing.
const holderSlack = 30

// holderCommand is the container's init: it holds the pod open until its
// deadline (plus holderSlack), sleeping again when a stop of the job
// (stopCommand: every process but init) killed its sleep, and exits on
// SIGUSR1 (endCommand), which ends the container and so makes the kubelet
// report how it ended: OOMKilled when the node's kernel OOM-killed in the
// container during the job (containerd's TaskOOM), whether or not the
// sandbox lived on.
func holderCommand(deadline int64) []string {
	return []string{"sh", "-c", fmt.Sprintf("trap 'exit 0' USR1; until sleep %d & wait $!; do :; done", deadline+holderSlack)}
}

// ImagePrefix names skillbox's own images on the nodes (imported by
// digest, see images.go): ImagePrefix + NAME + "@" + DIGEST.
const ImagePrefix = "skillbox.local/"

var (
	digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	// A repository path of a container image reference.
	repoPattern = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
)

// podName maps a run id ([A-Za-z0-9][A-Za-z0-9_-]{0,63}) to a DNS-1123
// label (lowercase letters, digits and '-', at most 63, starting and
// ending with a letter or digit), usable as the pod's name and as a label
// value. An id that is one already is kept; any other is lowercased, its
// '_' made '-', and a hash of the id appended, so that two ids never map
// to one name (Run and run_1 differ from run and run-1).
func podName(id string) string {
	mapped := strings.ReplaceAll(strings.ToLower(id), "_", "-")
	if mapped == id && len(id) <= 63 && !strings.HasSuffix(id, "-") {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	base := mapped
	if len(base) > 54 {
		base = base[:54]
	}
	return strings.TrimRight(base, "-") + "-" + hex.EncodeToString(sum[:4])
}

// ImageReference is the reference a node runs job's image by: always by
// digest, so that the node runs exactly the bytes that were approved. A
// skillbox image is ImagePrefix+NAME@DIGEST (imported into the nodes, see
// ImportArchive); a registry image is its repository @DIGEST.
func ImageReference(img runtime.ImageRef) (string, error) {
	if img.Digest == "" {
		return "", errkind.Errorf(runtime.ErrInvalidJob, "image %q has no digest: the kubernetes runtime runs images by digest only (name@sha256:…), so that the node runs exactly the approved bytes", img.Name)
	}
	if !digestPattern.MatchString(img.Digest) {
		return "", errkind.Errorf(runtime.ErrInvalidJob, "image %q: digest %q is not sha256: and 64 lowercase hex digits", img.Name, img.Digest)
	}
	if img.Ref != "" {
		return registryRepository(img.Ref) + "@" + img.Digest, nil
	}
	if !repoPattern.MatchString(img.Name) {
		return "", errkind.Errorf(runtime.ErrInvalidJob, "image name %q cannot name an image on a node: use lowercase letters, digits and . _ - /", img.Name)
	}
	return ImagePrefix + img.Name + "@" + img.Digest, nil
}

// registryRepository is ref without its tag or digest.
func registryRepository(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	slash := strings.LastIndexByte(ref, '/')
	if colon := strings.LastIndexByte(ref, ':'); colon > slash {
		ref = ref[:colon]
	}
	return ref
}

// unsupported says why job cannot run on this backend yet, or nil.
func unsupported(job runtime.Job) error {
	why := ""
	switch {
	case job.Sandbox.Network && job.Sandbox.Egress == nil:
		// An open network would be the cluster's pod network, unfiltered:
		// a pod reaches the network only through its egress proxy
		// (egress.go), and a job that asks for more is refused rather
		// than given it.
		why = "an open network (network without egress rules) is not supported by the kubernetes runtime: give the run egress destinations in its policy (its pod then reaches only its egress proxy), or run it on another runtime"
	case job.Sandbox.Egress != nil && len(job.Sandbox.Egress.Secrets) > 0:
		why = "egress secrets are not supported by the kubernetes runtime yet (the pod would need skillbox's CA): run the job without secrets, or on another runtime"
	case job.Sandbox.Session != nil:
		why = "sessions are not supported by the kubernetes runtime yet: use another runtime"
	case strings.ContainsRune(job.Invocation.Args[0], '='):
		why = "a command whose name contains '=' cannot be run by the kubernetes runtime (env would take it for a variable)"
	}
	if why == "" {
		return nil
	}
	return errkind.Errorf(runtime.ErrUnavailable, "run %s: %s", job.Sandbox.ID, why)
}

// The pod's deadline (activeDeadlineSeconds) counts from the pod's start
// on the node, which is before its image is ready and its container runs:
// a deadline of the job's timeout alone would end a pod with a short
// timeout before its job began. So the pod is made with the timeout plus
// runtime.BootTimeout (the most Run waits for the container), and Run
// tightens it to the time the pod has been up plus the timeout when the
// job starts (runDeadline): from then on the kubelet ends the pod at the
// job's timeout plus endSlack, rounded up to a second, even when skillbox
// is gone. endSlack leaves skillbox, whose own timer ends the job at its
// timeout, the time to stop the job and read its outputs back before the
// kubelet ends the pod with its workdir.
const endSlack = 30 * time.Second

// deadlineSeconds is d rounded up to a second, at least 1.
func deadlineSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// bootDeadline is the deadline a pod is made with.
func bootDeadline(timeout time.Duration) int64 { return deadlineSeconds(timeout + runtime.BootTimeout) }

// runDeadline is the deadline of a pod up for at most up whose job starts
// now with timeout: up plus timeout, rounded up, never past the pod's
// deadline so far (a deadline can only be shortened).
func runDeadline(up, timeout time.Duration, current int64) int64 {
	return min(deadlineSeconds(up+timeout), current)
}

// podSpec is the pod of job, in namespace: RuntimeClass gvisor, no
// service-account token, nobody with no capabilities on a read-only root,
// the runtime's seccomp profile, resources equal to the job's limits, a
// deadline of its timeout (plus the boot time, see bootDeadline), memory-backed /work and /tmp of the
// limits' sizes, a small memory-backed frameDir for the job's frame (see
// io.go), and the image by digest. Its container holds the pod
// open (holderCommand) until the job is executed into it. A job the backend cannot
// run as it asks is refused: ErrInvalidJob without an image digest,
// ErrUnavailable for what comes later (an open network, egress secrets,
// sessions).
// image is the reference the node runs (nodeImage: the derived image of
// the job's skill files and dependency layer, or a registry's copy); ""
// means the job's image as imported into the nodes (ImageReference).
func podSpec(job runtime.Job, namespace, image string) (*corev1.Pod, error) {
	if err := unsupported(job); err != nil {
		return nil, err
	}
	base, err := ImageReference(job.Sandbox.Image)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
	}
	if image == "" {
		image = base
	}
	lim := job.Limits()
	name := podName(job.Sandbox.ID)
	deadline := bootDeadline(lim.Timeout)
	no, yes := false, true
	nobody := int64(runtime.ContainerUID)
	group := int64(runtime.ContainerGID)
	zero := int64(0)
	class := RuntimeClass
	resources := corev1.ResourceList{
		corev1.ResourceMemory: *resource.NewQuantity(lim.MemoryBytes, resource.BinarySI),
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(math.Ceil(lim.CPUs*1000)), resource.DecimalSI),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   namespace,
			Labels:      map[string]string{LabelManagedBy: ManagedBy, LabelRun: name},
			Annotations: map[string]string{AnnotationRunID: job.Sandbox.ID, AnnotationImage: job.Sandbox.Image.Name + "@" + job.Sandbox.Image.Digest},
		},
		Spec: corev1.PodSpec{
			RuntimeClassName:              &class,
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &nobody,
				RunAsGroup:     &group,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent, // by digest: imported, or pulled once
				Command:         holderCommand(deadline),
				WorkingDir:      runtime.WorkDir,
				Resources:       corev1.ResourceRequirements{Requests: resources, Limits: resources.DeepCopy()},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             &yes,
					RunAsUser:                &nobody,
					RunAsGroup:               &group,
					Privileged:               &no,
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: volumeWork, MountPath: runtime.WorkDir},
					{Name: volumeTmp, MountPath: runtime.HomeDir},
					{Name: volumeFrame, MountPath: frameDir},
				},
			}},
			Volumes: []corev1.Volume{memoryVolume(volumeWork, lim.WorkdirBytes), memoryVolume(volumeTmp, lim.TmpBytes), memoryVolume(volumeFrame, frameDirBytes)},
		},
	}, nil
}

// memoryVolume is a memory-backed emptyDir, a tmpfs on the node of size
// bytes: what a script writes there counts against the pod's memory, as
// /work and /tmp do in the local backends' sandboxes.
func memoryVolume(name string, size int64) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(size, resource.BinarySI)}}}
}

// requestCPU makes pod request percent of its CPU limit (at least one
// millicore); 0 and 100 leave the request at the limit.
func requestCPU(pod *corev1.Pod, percent int) {
	if percent <= 0 || percent >= 100 {
		return
	}
	for i := range pod.Spec.Containers {
		r := &pod.Spec.Containers[i].Resources
		lim, ok := r.Limits[corev1.ResourceCPU]
		if !ok {
			continue
		}
		r.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(1, lim.MilliValue()*int64(percent)/100), resource.DecimalSI)
	}
}
