package waitfor

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	for _, tc := range []struct {
		name    string
		readyAt int // the call from which cond holds; 0 never
		timeout time.Duration
		wantErr bool
		maxWait time.Duration
	}{
		{name: "holds at once", readyAt: 1, timeout: time.Second, maxWait: 50 * time.Millisecond},
		{name: "holds on the fourth poll", readyAt: 4, timeout: 5 * time.Second, maxWait: time.Second},
		{name: "never holds", readyAt: 0, timeout: 100 * time.Millisecond, wantErr: true, maxWait: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			notReady := errors.New("2 runs live, want 0")
			start := time.Now()
			err := Until(tc.timeout, func() error {
				n := int(calls.Add(1))
				if tc.readyAt > 0 && n >= tc.readyAt {
					return nil
				}
				return notReady
			})
			took := time.Since(start)
			if tc.wantErr {
				if !errors.Is(err, notReady) {
					t.Fatalf("Until = %v, want cond's last error wrapped", err)
				}
				if took < tc.timeout {
					t.Errorf("Until gave up after %v, before its timeout %v", took, tc.timeout)
				}
			} else if err != nil {
				t.Fatalf("Until = %v, want nil", err)
			}
			if !tc.wantErr && int(calls.Load()) != tc.readyAt {
				t.Errorf("cond called %d times, want %d (no poll after it holds)", calls.Load(), tc.readyAt)
			}
			if took > tc.maxWait {
				t.Errorf("Until took %v, want at most %v", took, tc.maxWait)
			}
		})
	}
}

// recorder is a testing.TB that records a Fatalf instead of stopping the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestTrueWithinNoError(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wait     func(tb testing.TB)
		wantFail string
	}{
		{"True holds", func(tb testing.TB) {
			True(tb, "the flag", time.Second, func() bool { return true })
		}, ""},
		{"True times out", func(tb testing.TB) {
			True(tb, "the flag", 20*time.Millisecond, func() bool { return false })
		}, "waiting for the flag: still not so after 20ms"},
		{"Within holds", func(tb testing.TB) {
			if !Within(time.Second, func() bool { return true }) {
				tb.Fatalf("Within = false")
			}
		}, ""},
		{"Within times out", func(tb testing.TB) {
			if Within(20*time.Millisecond, func() bool { return false }) {
				tb.Fatalf("Within = true")
			}
		}, ""},
		{"NoError holds", func(tb testing.TB) {
			NoError(tb, "the runs to end", time.Second, func() error { return nil })
		}, ""},
		{"NoError times out with the last error", func(tb testing.TB) {
			NoError(tb, "the runs to end", 20*time.Millisecond, func() error { return errors.New("2 runs live") })
		}, "waiting for the runs to end: still not so after 20ms: 2 runs live"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			tc.wait(r)
			if r.failed != tc.wantFail {
				t.Errorf("failure %q, want %q", r.failed, tc.wantFail)
			}
		})
	}
}
