package stack_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
)

// localConfig is the defaults with an audit log and a skill root in temp
// dirs.
func localConfig(t *testing.T) *policy.Config {
	t.Helper()
	cfg := policy.Default()
	cfg.Daemon.AuditDir = filepath.Join(t.TempDir(), "audit")
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "hello"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "hello", "SKILL.md"), []byte("---\nname: hello\ndescription: says hello\n---\nbody\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Skills.Roots = []string{root}
	return cfg
}

// A Local stack without an engine is a service over the registry with
// sessions in a temp state dir, writing the config's audit log; Close
// removes the state dir and closes the log.
func TestLocalStack(t *testing.T) {
	cfg := localConfig(t)
	st, err := stack.New(context.Background(), stack.Options{Mode: stack.Local, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if st.Engine() != nil || st.Daemon() != nil || st.Service() == nil || !st.Journal().Enabled() {
		t.Fatalf("local stack: engine %v daemon %v service %v journal %v", st.Engine(), st.Daemon(), st.Service(), st.Journal().Enabled())
	}
	if _, err := st.Registry().Get("hello"); err != nil {
		t.Fatalf("registry: %v", err)
	}
	caller := api.Peer{UID: uint32(os.Getuid())}
	ses, err := st.Service().CreateSession(context.Background(), caller, api.CreateSessionParams{})
	if err != nil {
		t.Fatalf("sessions in the temp state dir: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	var recs []*audit.Record
	if err := audit.Read(cfg.Daemon.AuditDir, func(r *audit.Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, r := range recs {
		if r.Event == audit.EventSessionCreate && r.SessionID == ses.SessionID {
			created++
		}
	}
	if created != 1 {
		t.Errorf("audit log has %d session.create records of %s, want 1 (%d records)", created, ses.SessionID, len(recs))
	}
}

// An unknown mode or a missing config is refused, not half built.
func TestNewRefusesBadOptions(t *testing.T) {
	if _, err := stack.New(context.Background(), stack.Options{Mode: stack.Local}); err == nil {
		t.Error("no config accepted")
	}
	if _, err := stack.New(context.Background(), stack.Options{Config: policy.Default()}); err == nil {
		t.Error("no mode accepted")
	}
}

// An audit log that cannot be opened is reported as the audit part.
func TestNewNamesTheFailingPart(t *testing.T) {
	cfg := localConfig(t)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Daemon.AuditDir = notDir
	_, err := stack.New(context.Background(), stack.Options{Mode: stack.Local, Config: cfg})
	var se *stack.Error
	if err == nil || !errors.As(err, &se) || se.Part != stack.PartAudit {
		t.Fatalf("audit dir that is a file: %v", err)
	}
}
