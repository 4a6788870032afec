package process

import (
	"context"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

func TestAwaitEnd(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name       string
		ctx        context.Context
		exit       chan int
		ends       Ends
		wantExited bool
		want       runtime.Reason
	}{
		{"exited", context.Background(), make(chan int, 1), Ends{Left: time.Hour}, true, runtime.ReasonExit},
		{"timeout", context.Background(), make(chan int), Ends{Left: time.Millisecond}, false, runtime.ReasonTimeout},
		{"stdout over its cap", context.Background(), make(chan int), Ends{Left: time.Hour, StdoutOver: closed}, false, runtime.ReasonOutputCap},
		{"stderr over its cap", context.Background(), make(chan int), Ends{Left: time.Hour, StderrOver: closed}, false, runtime.ReasonOutputCap},
		{"caller gone", cancelled, make(chan int), Ends{Left: time.Hour}, false, runtime.ReasonKilled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantExited {
				tc.exit <- 7
			}
			v, exited, reason := AwaitEnd(tc.ctx, tc.exit, tc.ends)
			if exited != tc.wantExited || reason != tc.want || (exited && v != 7) {
				t.Errorf("AwaitEnd = %v, %v, %q; want exited %v, %q", v, exited, reason, tc.wantExited, tc.want)
			}
		})
	}
	if st, r := FinishEgress(nil, runtime.ReasonTimeout); st != nil || r != runtime.ReasonTimeout {
		t.Errorf("FinishEgress(nil) = %v, %q", st, r)
	}
}
