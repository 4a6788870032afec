package process

import "testing"

func TestRunscHostPids(t *testing.T) {
	if got := RunscHostPids(128, "ptrace"); got != 128*8+64 {
		t.Errorf("runscHostPids(128) = %d", got)
	}
}

func TestCPUMax(t *testing.T) {
	for _, tc := range []struct {
		cpus float64
		want string
	}{{1, "100000 100000"}, {0.5, "50000 100000"}, {2.5, "250000 100000"}, {0.001, "1000 100000"}} {
		if got := CPUMax(tc.cpus); got != tc.want {
			t.Errorf("CPUMax(%v) = %q, want %q", tc.cpus, got, tc.want)
		}
	}
}
