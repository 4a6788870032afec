package process

import (
	"context"
	"errors"
	"slices"
	"testing"
)

type fakeSandbox struct {
	id        string
	err       error
	destroyed *[]string
}

func (f fakeSandbox) ID() string { return f.id }
func (f fakeSandbox) Destroy(context.Context) error {
	*f.destroyed = append(*f.destroyed, f.id)
	return f.err
}

func TestLive(t *testing.T) {
	var destroyed []string
	failed := errors.New("teardown failed")
	var l Live[fakeSandbox]
	for _, s := range []fakeSandbox{{id: "a"}, {id: "b", err: failed}, {id: "c"}} {
		s.destroyed = &destroyed
		l.Add(s)
	}
	l.Remove("c")
	if err := l.DestroyAll(context.Background()); !errors.Is(err, failed) {
		t.Errorf("DestroyAll = %v, want the failed teardown's error", err)
	}
	slices.Sort(destroyed)
	if !slices.Equal(destroyed, []string{"a", "b"}) {
		t.Errorf("destroyed %q, want a and b (c was removed)", destroyed)
	}
}
