package kubernetes

import (
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

func TestPodEndingReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  podEnding
		want runtime.Reason
	}{
		{"deadline", podEnding{phase: "Failed", why: "DeadlineExceeded"}, runtime.ReasonTimeout},
		{"oom", podEnding{phase: "Failed", container: "OOMKilled"}, runtime.ReasonOOM},
		{"evicted", podEnding{phase: "Failed", why: "Evicted"}, ""},
		{"error", podEnding{phase: "Failed", container: "Error"}, ""},
		{"not ended", podEnding{}, ""},
		{"deleted by someone else", podEnding{deleted: true}, runtime.ReasonKilled},
		{"deleted after it failed", podEnding{phase: "Failed", container: "OOMKilled", deleted: true}, runtime.ReasonKilled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.end.reason(); got != tc.want {
				t.Errorf("%s: reason %q, want %q", tc.end, got, tc.want)
			}
		})
	}
}
