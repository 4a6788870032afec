package runtimetest

import (
	"fmt"
	"os"
	"testing"
)

// RequireEnv, set to 1 by `make test` (as root), turns a missing sandbox
// prerequisite (root, runsc, runc, containerd, a built image, node) from a
// skip into a failure: the isolation tests must run against real sandboxes
// there, never be skipped silently.
const RequireEnv = "SKILLBOX_TEST_REQUIRE_SANDBOXES"

// SkipUnlessRequired skips t for a missing prerequisite, or fails it when
// RequireEnv says the prerequisites are required.
func SkipUnlessRequired(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (required here: %s=1)", msg, RequireEnv)
	}
	t.Skip(msg)
}
