package egress

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A Start that fails after opening its sockets leaves nothing behind.
func TestStartFailureCleansUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces): run the tests as root")
	}
	id := "skillbox-egress-unit-fail"
	_, err := Start(context.Background(), id, t.TempDir(), Config{
		Rules:   []Rule{{Host: "api.example.com", Port: 443}},
		Secrets: []Secret{{Name: "T", Value: "v", Hosts: []string{"api.example.com"}, Header: "A: %s"}},
	})
	if !errors.Is(err, ErrSetup) {
		t.Fatalf("Start without a CA for its secrets: %v", err)
	}
	for _, ns := range []string{NamespacePrefix + "s-" + id, NamespacePrefix + "p-" + id} {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
			t.Errorf("namespace %s left", ns)
			_ = RemoveNamespaces(context.Background(), id)
		}
	}
}
