package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skillbox/skillbox/images/deps"
)

// The rule a run waits by for a layer that is not built: a failed build
// ends every wait at once with its error, a wait never outlasts its limit
// (the run's timeout), and with nothing in progress there is no wait.
func TestLayerWait(t *testing.T) {
	built := &deps.Layer{Dir: "/layers/built"}
	buildErr := errors.New("no wheel of python-pptx")
	notReady := func() (*deps.Layer, []string, error) { return nil, nil, deps.ErrNotReady }
	noFlight := func(context.Context) (*deps.Layer, bool, error) { return nil, false, nil }
	// ending is a load build that ends d after the wait looks at it, with err.
	ending := func(d time.Duration, err error) func() *loadBuild {
		return func() *loadBuild {
			b := &loadBuild{done: make(chan struct{})}
			time.AfterFunc(d, func() { b.err = err; close(b.done) })
			return b
		}
	}
	for _, tc := range []struct {
		name       string
		w          layerWait
		limit      time.Duration
		wantLayer  *deps.Layer
		wantWaited bool
		wantErr    error
		// the wait must end by then (and not before minDur)
		maxDur, minDur time.Duration
	}{
		{
			name:  "the load's build fails: the wait ends at once with its error",
			w:     layerWait{load: ending(200*time.Millisecond, buildErr), ready: notReady, flight: noFlight},
			limit: time.Minute, wantWaited: true, wantErr: buildErr,
			minDur: 200 * time.Millisecond, maxDur: 200*time.Millisecond + time.Second,
		},
		{
			name: "the load's build succeeds: the layer",
			w: layerWait{load: ending(100*time.Millisecond, nil), flight: noFlight,
				ready: func() (*deps.Layer, []string, error) { return built, []string{"a note"}, nil }},
			limit: time.Minute, wantLayer: built, wantWaited: true, maxDur: time.Second,
		},
		{
			name:  "the build outlasts the run's timeout: the wait ends at the limit",
			w:     layerWait{load: ending(time.Hour, nil), ready: notReady, flight: noFlight},
			limit: 300 * time.Millisecond, wantWaited: true, wantErr: context.DeadlineExceeded,
			minDur: 300 * time.Millisecond, maxDur: 300*time.Millisecond + time.Second,
		},
		{
			name: "a build of the same layer in flight fails: its error",
			w: layerWait{load: func() *loadBuild { return nil }, ready: notReady,
				flight: func(ctx context.Context) (*deps.Layer, bool, error) {
					select {
					case <-time.After(100 * time.Millisecond):
						return nil, true, buildErr
					case <-ctx.Done():
						return nil, true, ctx.Err()
					}
				}},
			limit: time.Minute, wantWaited: true, wantErr: buildErr, maxDur: time.Second,
		},
		{
			name: "a flight outlasts the limit",
			w: layerWait{load: func() *loadBuild { return nil }, ready: notReady,
				flight: func(ctx context.Context) (*deps.Layer, bool, error) { <-ctx.Done(); return nil, true, ctx.Err() }},
			limit: 200 * time.Millisecond, wantWaited: true, wantErr: context.DeadlineExceeded,
			minDur: 200 * time.Millisecond, maxDur: time.Second,
		},
		{
			name: "the load failed another family's layer: this one is built",
			w: layerWait{load: ending(50*time.Millisecond, buildErr), flight: noFlight,
				ready: func() (*deps.Layer, []string, error) { return built, nil, nil }},
			limit: time.Minute, wantLayer: built, wantWaited: true, maxDur: time.Second,
		},
		{
			name:  "nothing in progress: no wait",
			w:     layerWait{load: func() *loadBuild { return nil }, ready: notReady, flight: noFlight},
			limit: time.Minute, maxDur: 100 * time.Millisecond,
		},
		{
			name:  "the load built something else: the flight decides",
			w:     layerWait{load: ending(50*time.Millisecond, nil), ready: notReady, flight: noFlight},
			limit: time.Minute, maxDur: time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			l, _, waited, err := tc.w.wait(context.Background(), tc.limit)
			took := time.Since(began)
			if l != tc.wantLayer || waited != tc.wantWaited || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("wait = %v, waited %v, %v; want %v, %v, %v", l, waited, err, tc.wantLayer, tc.wantWaited, tc.wantErr)
			}
			if took > tc.maxDur || took < tc.minDur {
				t.Errorf("the wait took %s, want between %s and %s", took, tc.minDur, tc.maxDur)
			}
		})
	}
	t.Run("a cancelled caller ends the wait", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		w := layerWait{load: ending(time.Hour, nil), ready: notReady, flight: noFlight}
		if _, _, _, err := w.wait(ctx, time.Minute); !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
}
