package runner

import (
	"testing"
	"time"
)

// A uid's runs share one budget of egress records recorded one
// by one; it refills over a minute, and uids do not share it.
func TestEgressUIDBudget(t *testing.T) {
	var b uidBudgets
	one := b.of(65534)
	if b.of(65534) != one {
		t.Fatal("a uid's runs do not share one budget")
	}
	taken := 0
	for i := 0; i < 3*egressReportsPerUID; i++ {
		if one.Take() {
			taken++
		}
	}
	if taken != egressReportsPerUID {
		t.Fatalf("%d taken, want %d", taken, egressReportsPerUID)
	}
	if !b.of(65533).Take() {
		t.Fatal("another uid's budget is spent by the first")
	}
	k := one.(*uidBucket)
	k.mu.Lock()
	k.last = k.last.Add(-30 * time.Second)
	k.mu.Unlock()
	taken = 0
	for one.Take() {
		taken++
	}
	if taken < egressReportsPerUID/2-1 || taken > egressReportsPerUID/2+1 {
		t.Fatalf("half a minute refilled %d, want about %d", taken, egressReportsPerUID/2)
	}
}
