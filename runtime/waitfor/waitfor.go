// Package waitfor is how a test waits for something to become so: it polls a
// condition until it holds or a timeout passes, instead of sleeping a guessed
// time and hoping the thing is ready by then. A poll returns as soon as the
// condition holds, so a fast machine is not slowed and a slow one gets the
// whole timeout.
//
// It imports only the standard library, so every test in the tree, at any
// layer, can use it.
package waitfor

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// The pause between two polls starts at firstPause and doubles up to
// maxPause: quick for what is ready at once, gentle for what takes seconds
// (a daemon asked by a subprocess, a sandbox booting).
const (
	firstPause = 5 * time.Millisecond
	maxPause   = 200 * time.Millisecond
)

// errNotYet is Within's error for a cond that returned false.
var errNotYet = errors.New("not yet")

// Until calls cond until it returns nil or timeout passes, and returns nil or
// cond's last error with the time waited. It does not fail a test, so it
// serves goroutines and helpers that report errors themselves.
func Until(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	pause := firstPause
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("still not so after %v: %w", timeout, err)
		}
		time.Sleep(min(pause, time.Until(deadline)))
		pause = min(2*pause, maxPause)
	}
}

// Within calls cond until it returns true or timeout passes, and says
// whether it did; for a test that reports the failure in its own words, or
// goes on after it (t.Errorf).
func Within(timeout time.Duration, cond func() bool) bool {
	return Until(timeout, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) == nil
}

// True fails t (Fatal) unless cond returns true within timeout; what names
// the awaited thing for the failure message ("the run to end").
func True(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !Within(timeout, cond) {
		t.Fatalf("waiting for %s: still not so after %v", what, timeout)
	}
}

// NoError fails t (Fatal) unless cond returns nil within timeout; the
// failure message holds cond's last error, which should say what is not yet
// so ("2 runs live, want 0").
func NoError(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Until(timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
