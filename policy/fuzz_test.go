package policy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// FuzzConfig: whatever a config file holds, Parse returns a config or a
// ConfigError, never panics, and a config it accepts parses the same way
// again.
func FuzzConfig(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.hcl")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`policy "x" { skills = ["*"] env = ["MODE", "MYTOOL_*"] }`))
	f.Add([]byte(`daemon { max_connections_per_uid = 2 approver_runs = 1 } audit { min_free = "1GiB" }`))
	f.Add([]byte(`policy "nb" { skills = ["nb-*"] isolation = "session" } sessions { idle_timeout = "0" checkpoint_budget = "1GiB" }`))
	f.Add([]byte(`daemon { metrics = "127.0.0.1:9464" }`))
	f.Add([]byte(`daemon { metrics = "unix:/run/skillbox/metrics.sock" }`))
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := Parse(src, "fuzz.hcl")
		if err != nil {
			return
		}
		if _, err := Parse(src, "fuzz.hcl"); err != nil {
			t.Fatalf("accepted once, refused again: %v", err)
		}
		// An accepted metrics address is loopback or a socket, and reads
		// back as itself.
		if m := c.Daemon.Metrics; m.Enabled() {
			again, err := ParseMetricsAddress(m.String())
			if err != nil || again != m {
				t.Fatalf("metrics %+v read back as %+v, %v", m, again, err)
			}
		}
		for _, r := range c.Rules {
			for _, e := range r.Env {
				if w := runtime.CheckEnvPattern(e); w != "" {
					t.Fatalf("rule %s kept env pattern %q: %s", r.Name, e, w)
				}
			}
		}
	})
}
