package process

import "testing"

func TestRunscHostPids(t *testing.T) {
	if got := RunscHostPids(128, "ptrace"); got != 128*8+64 {
		t.Errorf("runscHostPids(128) = %d", got)
	}
}
