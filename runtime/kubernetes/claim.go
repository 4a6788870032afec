package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Claims. Pods kept warm are shared by every replica of the daemon that
// serves the namespace, so that a replica that has none left takes one
// another made rather than going cold. Which pods are free is known from a
// watch (FreePods), never from a request on a run's path; what makes a
// claim exclusive is one merge patch that sets the pod's holder label and
// carries the resourceVersion the claimer saw. The API server applies a
// patch with a resourceVersion only if the object is still at that
// version, so of two replicas racing for one pod exactly one patch lands
// and the other gets a conflict: it was taken, and the loser tries the
// next free pod. A pod that was claimed is never released: it runs one
// job (or one session) and is deleted.

// Labels of a pod in the shared pool.
const (
	// LabelPool is the pool a warm pod belongs to: a hash of what makes
	// two pods interchangeable (its image and sandbox limits).
	LabelPool = "skillbox.io/pool"
	// LabelHolder is the replica (its instance id) that claimed the pod;
	// a pool pod without it is free.
	LabelHolder = "skillbox.io/holder"
	// AnnotationClaimed is when it was claimed (RFC 3339, for operators).
	AnnotationClaimed = "skillbox.io/claimed-at"
)

// ErrClaimLost is the kind of a claim another replica won, or that found
// the pod gone or changed: the pod is not the claimer's, and another free
// pod may be.
var ErrClaimLost = errors.New("pod claimed by another replica")

// podPatcher is the one API call a claim makes.
type podPatcher interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Pod, error)
}

// claimPatch is the merge patch that claims a pod at resourceVersion rv
// for holder.
func claimPatch(rv, holder string, now time.Time) ([]byte, error) {
	if rv == "" {
		// Without a version the patch would apply unconditionally, and
		// two claimers could both win.
		return nil, errors.New("claim: the pod has no resourceVersion to claim it at")
	}
	if holder == "" {
		return nil, errors.New("claim: no holder")
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": rv,
		"labels":          map[string]string{LabelHolder: holder},
		"annotations":     map[string]string{AnnotationClaimed: now.UTC().Format(time.RFC3339Nano)},
	}})
}

// claimPod claims pod, as seen at its resourceVersion, for holder. It
// returns the claimed pod, or an ErrClaimLost error when the pod was
// claimed already, changed since it was seen (a claim by another, or its
// end) or is gone.
func claimPod(ctx context.Context, pods podPatcher, pod *corev1.Pod, holder string) (*corev1.Pod, error) {
	if h := pod.Labels[LabelHolder]; h != "" {
		return nil, errkind.Errorf(ErrClaimLost, "pod %s/%s: held by %s", pod.Namespace, pod.Name, h)
	}
	patch, err := claimPatch(pod.ResourceVersion, holder, time.Now())
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	got, err := pods.Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsConflict(err):
		return nil, errkind.Errorf(ErrClaimLost, "pod %s/%s: changed since version %s (claimed by another replica)", pod.Namespace, pod.Name, pod.ResourceVersion)
	case apierrors.IsNotFound(err):
		return nil, errkind.Errorf(ErrClaimLost, "pod %s/%s: gone", pod.Namespace, pod.Name)
	case err != nil:
		return nil, fmt.Errorf("claim pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if got.Labels[LabelHolder] != holder {
		// The API server applied the patch, yet another holder is on
		// the pod: never take it for ours.
		return nil, errkind.Errorf(ErrClaimLost, "pod %s/%s: held by %s after the claim", pod.Namespace, pod.Name, got.Labels[LabelHolder])
	}
	return got, nil
}

// free says whether a pod seen in the watch is a warm pod of no holder
// whose container runs (and so may be claimed).
func free(p *corev1.Pod) bool {
	if p.Labels[LabelPool] == "" || p.Labels[LabelHolder] != "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == containerName {
			return s.State.Running != nil
		}
	}
	return false
}

// FreePods is the watch of the namespace's pool pods: it knows which are
// free without asking the API server, and claims one for its holder with
// one conditional patch.
type FreePods struct {
	pods     podPatcher
	holder   string
	informer cache.SharedIndexInformer
	stop     chan struct{}
	once     sync.Once
}

// NewFreePods watches the pool pods (LabelManagedBy skillbox, with a
// LabelPool) of namespace and claims them for holder. Start it before use.
func NewFreePods(cs k8s.Interface, namespace, holder string) *FreePods {
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{LabelManagedBy: ManagedBy}.String() + "," + LabelPool
		}))
	return &FreePods{
		pods:     cs.CoreV1().Pods(namespace),
		holder:   holder,
		informer: factory.Core().V1().Pods().Informer(),
		stop:     make(chan struct{}),
	}
}

// Start runs the watch and waits until it has listed the pods once.
func (f *FreePods) Start(ctx context.Context) error {
	go f.informer.Run(f.stop)
	if !cache.WaitForCacheSync(ctx.Done(), f.informer.HasSynced) {
		return errkind.Errorf(runtime.ErrUnavailable, "watching the pool's pods: not listed before %v", ctx.Err())
	}
	return nil
}

// Stop ends the watch.
func (f *FreePods) Stop() { f.once.Do(func() { close(f.stop) }) }

// Free lists the free pods of pool, oldest first, as the watch has them.
func (f *FreePods) Free(pool string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range f.informer.GetStore().List() {
		if p, ok := o.(*corev1.Pod); ok && p.Labels[LabelPool] == pool && free(p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Claim claims the oldest free pod of pool that no other replica takes
// first, or returns nil when there is none (the run goes cold). Only a
// failure that is no lost race is an error.
func (f *FreePods) Claim(ctx context.Context, pool string) (*corev1.Pod, error) {
	for _, p := range f.Free(pool) {
		got, err := claimPod(ctx, f.pods, p, f.holder)
		if errors.Is(err, ErrClaimLost) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return got, nil
	}
	return nil, nil
}
