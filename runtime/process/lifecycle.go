package process

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
)

// Stage is where a bundle backend's sandbox is in runtime.Sandbox's
// lifecycle: Create, Start, Deliver, Wait, each once and in that order.
// Each call moves it on and refuses a call out of order. The zero value is
// StageCreated.
type Stage int

const (
	StageCreated Stage = iota
	StageStarted
	StageDelivered
	StageWaited
)

// Start moves a created sandbox id on to started.
func (st *Stage) Start(id string) error {
	if *st != StageCreated {
		return fmt.Errorf("sandbox %s: Start after Start", id)
	}
	*st = StageStarted
	return nil
}

// Deliver is how every bundle backend's Deliver begins: it moves a
// started sandbox on to delivered and admits inv (Admit).
func (st *Stage) Deliver(ctx context.Context, spec runtime.SandboxSpec, inv runtime.Invocation, cgroup string, b *oci.Bundle) (runtime.Job, error) {
	if *st != StageStarted {
		return runtime.Job{}, fmt.Errorf("sandbox %s: Deliver before Start or twice", spec.ID)
	}
	*st = StageDelivered
	return Admit(ctx, spec, inv, cgroup, b)
}

// Wait moves a sandbox id on to waited; delivered says whether its job is
// there to wait for.
func (st *Stage) Wait(id string, delivered bool) error {
	if *st != StageDelivered || !delivered {
		return fmt.Errorf("sandbox %s: Wait without a delivered job", id)
	}
	*st = StageWaited
	return nil
}

// HandOver gives a warm sandbox's supervisor its job: the job's message,
// written in the background to the first process's stdin *in, which is
// then closed and cleared. The supervisor starts the job as it reads the
// message; started is that time.
func HandOver(in **os.File, job runtime.Job) (started time.Time, err error) {
	msg, err := SupervisorMessage(job)
	if err != nil {
		return time.Time{}, err
	}
	w := *in
	*in = nil
	started = time.Now()
	FeedAndClose(w, msg)
	return started, nil
}

// DestroyOnce runs a sandbox's destruction once, however often and from
// wherever Destroy is called, and gives every call its error. The zero
// value is ready.
type DestroyOnce struct {
	once sync.Once
	err  error
}

// Do runs destroy the first time and returns what it returned, then and
// on every later call.
func (d *DestroyOnce) Do(destroy func() error) error {
	d.once.Do(func() { d.err = destroy() })
	return d.err
}

// TeardownContext is the context a teardown runs with: its own, not the
// caller's, so that a cancelled caller cannot leave a container, mount or
// cgroup behind, bounded by TeardownTimeout.
func TeardownContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), TeardownTimeout)
}
