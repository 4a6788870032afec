package process

import (
	"context"
	"errors"
	"sync"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/oci"
)

// Live is the set of sandboxes a backend made and has not destroyed yet:
// Create adds each one, its Destroy removes it, and the backend's Close
// destroys what is left. The zero value is empty; it is safe for
// concurrent use.
type Live[S interface {
	ID() string
	Destroy(context.Context) error
}] struct {
	mu sync.Mutex
	m  map[string]S
}

// Add records s under its ID.
func (l *Live[S]) Add(s S) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]S{}
	}
	l.m[s.ID()] = s
}

// Remove forgets the sandbox id.
func (l *Live[S]) Remove(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id)
}

// DestroyAll destroys every sandbox still recorded, joining the errors.
func (l *Live[S]) DestroyAll(ctx context.Context) error {
	l.mu.Lock()
	left := make([]S, 0, len(l.m))
	for _, s := range l.m {
		left = append(left, s)
	}
	l.mu.Unlock()
	var errs []error
	for _, s := range left {
		if err := s.Destroy(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SetUp is the host side of a sandbox that every bundle backend's Create
// makes once the bundle b and the cgroup exist: the egress plumbing of a
// spec with Egress (StartEgress; nil without), and the low CPU weight of
// a Background sandbox. The caller destroys the sandbox should it fail.
func SetUp(ctx context.Context, spec runtime.SandboxSpec, b *oci.Bundle, cgroup string, opts *oci.SpecOptions, log runtime.Logger) (*egress.Egress, error) {
	var eg *egress.Egress
	if spec.Egress != nil {
		var err error
		if eg, err = StartEgress(ctx, spec, b.Dir, opts); err != nil {
			return nil, err
		}
	}
	if spec.Background {
		if err := SetBackgroundWeight(cgroup, true); err != nil {
			log.Debug("lowering the CPU weight of a booting sandbox failed", "id", spec.ID, "error", err)
		}
	}
	return eg, nil
}
