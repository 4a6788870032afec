package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// casPods is an API server's pods in miniature: a merge patch that
// carries a resourceVersion applies only at that version.
type casPods struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod
	rv   int
}

func (c *casPods) add(name string) *corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rv++
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: strconv.Itoa(c.rv), Labels: map[string]string{LabelPool: "p"}}}
	c.pods[name] = p
	return p.DeepCopy()
}

func (c *casPods) get(name string) *corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods[name].DeepCopy()
}

func (c *casPods) Patch(_ context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pods[name]
	if p == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	if pt != types.MergePatchType {
		return nil, errors.New("not a merge patch")
	}
	var patch struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Labels          map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &patch); err != nil {
		return nil, err
	}
	if rv := patch.Metadata.ResourceVersion; rv != "" && rv != p.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, name, errors.New("the object has been modified"))
	}
	for k, v := range patch.Metadata.Labels {
		p.Labels[k] = v
	}
	c.rv++
	p.ResourceVersion = strconv.Itoa(c.rv)
	return p.DeepCopy(), nil
}

func TestClaimPod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(c *casPods) *corev1.Pod // the pod as the claimer saw it
		lost    bool
	}{
		{"free", func(c *casPods) *corev1.Pod { return c.add("a") }, false},
		{"held as seen", func(c *casPods) *corev1.Pod {
			p := c.add("a")
			p.Labels[LabelHolder] = "other"
			return p
		}, true},
		{"changed since seen", func(c *casPods) *corev1.Pod {
			p := c.add("a")
			if _, err := claimPod(context.Background(), c, c.get("a"), "other"); err != nil {
				t.Fatal(err)
			}
			return p
		}, true},
		{"gone", func(c *casPods) *corev1.Pod {
			p := c.add("a")
			delete(c.pods, "a")
			return p
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &casPods{pods: map[string]*corev1.Pod{}}
			seen := tc.prepare(c)
			got, err := claimPod(context.Background(), c, seen, "me")
			if tc.lost {
				if !errors.Is(err, ErrClaimLost) {
					t.Fatalf("claim = %v, %v; want an ErrClaimLost error", got, err)
				}
				return
			}
			if err != nil || got.Labels[LabelHolder] != "me" {
				t.Fatalf("claim = %v, %v; want the pod held by me", got, err)
			}
		})
	}
}

func TestClaimPatchNeedsVersion(t *testing.T) {
	if _, err := claimPatch("", "me", time.Now()); err == nil {
		t.Fatal("a claim without a resourceVersion would apply unconditionally")
	}
}

// TestClaimRace races two claimers for one pod, as two replicas would:
// exactly one wins each round.
func TestClaimRace(t *testing.T) {
	c := &casPods{pods: map[string]*corev1.Pod{}}
	c.add("a")
	for round := range 1000 {
		seen := c.get("a")
		delete(seen.Labels, LabelHolder)
		c.mu.Lock()
		delete(c.pods["a"].Labels, LabelHolder)
		c.rv++
		c.pods["a"].ResourceVersion = strconv.Itoa(c.rv)
		seen.ResourceVersion = c.pods["a"].ResourceVersion
		c.mu.Unlock()
		var wins atomic.Int32
		var wg sync.WaitGroup
		for _, holder := range []string{"r1", "r2"} {
			wg.Go(func() {
				_, err := claimPod(context.Background(), c, seen.DeepCopy(), holder)
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, ErrClaimLost):
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d winners", round, n)
		}
	}
}
