package audit_test

import (
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/audit"
)

// audit.Limits mirrors runtime.Limits field for field so the engine can
// convert; this stops compiling if the two drift apart.
func TestLimitsConvertFromRuntime(t *testing.T) {
	l := audit.Limits(runtime.DefaultLimits)
	if l.Timeout != runtime.DefaultLimits.Timeout || l.OutputFiles != runtime.DefaultLimits.OutputFiles {
		t.Fatalf("%+v", l)
	}
}
