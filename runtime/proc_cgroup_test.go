package runtime

import "testing"

func TestRunscHostPids(t *testing.T) {
	if got := runscHostPids(128, "ptrace"); got != 128*8+64 {
		t.Errorf("runscHostPids(128) = %d", got)
	}
}
