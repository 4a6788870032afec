package stack_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/policy/replicaname"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
)

// TestOpenAuditReplica: a named replica writes its own chain under
// audit_dir and a second daemon with the same name is refused; an unnamed
// daemon writes in audit_dir itself under the host name.
func TestOpenAuditReplica(t *testing.T) {
	host, err := replicaname.Default()
	if err != nil {
		t.Skipf("this host's name is not a replica name: %v", err)
	}
	for _, tc := range []struct {
		name, replica, dir, want string
	}{
		{"named", "skillbox-0", "skillbox-0", "skillbox-0"},
		{"unnamed", "", "", host},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := policy.Default()
			cfg.Daemon.AuditDir = t.TempDir()
			cfg.Daemon.Replica = tc.replica
			l, err := stack.OpenAudit(cfg, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if want := filepath.Join(cfg.Daemon.AuditDir, tc.dir); l.Dir() != want || l.Replica() != tc.want {
				t.Fatalf("log in %s as %q, want %s as %q", l.Dir(), l.Replica(), want, tc.want)
			}
			_, err = stack.OpenAudit(cfg, hclog.NewNullLogger())
			if !errors.Is(err, audit.ErrLocked) {
				t.Fatalf("second daemon: %v, want ErrLocked", err)
			}
			if tc.replica != "" && !strings.Contains(err.Error(), "daemon.replica") {
				t.Fatalf("second daemon's error does not say how to fix it: %v", err)
			}
			if _, err := os.Stat(filepath.Join(l.Dir(), "audit-000001.jsonl")); err != nil {
				t.Fatal(err)
			}
		})
	}
}
