package policy

import (
	"strings"
	"testing"
)

func TestDaemonReplica(t *testing.T) {
	for _, tc := range []struct {
		name, src, want, err string
	}{
		{"unset", `daemon {}`, "", ""},
		{"pod name", `daemon { replica = "skillbox-7d9f8c6b5-x2x4q" }`, "skillbox-7d9f8c6b5-x2x4q", ""},
		{"path", `daemon { replica = "../x" }`, "", "daemon.replica"},
		{"empty", `daemon { replica = "" }`, "", "empty"},
		{"space", `daemon { replica = "a b" }`, "", "not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.src), "r.hcl")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse: %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Daemon.Replica != tc.want {
				t.Fatalf("replica %q, want %q", c.Daemon.Replica, tc.want)
			}
		})
	}
}
