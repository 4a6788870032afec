package runtimetest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// HostSecret is a file on the host the sandbox must not see.
type HostSecret struct {
	Path, Value string
}

// NewHostSecret writes a fresh secret under /tmp, removed when t ends.
func NewHostSecret(t testing.TB) HostSecret {
	t.Helper()
	s := HostSecret{Path: "/tmp/skillbox-secret-" + RandomHex(6), Value: "SECRET-" + RandomHex(12)}
	if err := os.WriteFile(s.Path, []byte(s.Value+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(s.Path) })
	return s
}

// HostEnvName is the variable of the test process a sandbox must not see
// (its value: CaseEnv.EnvVal).
const HostEnvName = "SKILLBOX_TEST_HOST_SECRET"

// RandomHex is n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// MakeSkill writes files (relative path -> content) into a fresh skill dir
// readable by the container's nobody, removed when t ends.
func MakeSkill(t testing.TB, files map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skillbox-skill-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// WantExit checks a result's exit code and reason.
func WantExit(t *testing.T, res *runtime.Result, code int, reason runtime.Reason) {
	t.Helper()
	if res.ExitCode != code || res.Reason != reason {
		t.Errorf("exit %d reason %s, want exit %d reason %s\nstdout: %s\nstderr: %s",
			res.ExitCode, res.Reason, code, reason, Clip(res.Stdout), Clip(res.Stderr))
	}
}

// Clip is b, cut to 2000 bytes for a message.
func Clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

func NoSecret(t *testing.T, res *runtime.Result, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if bytes.Contains(res.Stdout, []byte(s)) || bytes.Contains(res.Stderr, []byte(s)) {
			t.Errorf("secret %q visible in the sandbox\nstdout: %s\nstderr: %s", s, Clip(res.Stdout), Clip(res.Stderr))
		}
	}
}

func HostRelease(t *testing.T) string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// HostProcsWith lists host processes whose argv contains marker.
func HostProcsWith(marker string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	self := fmt.Sprint(os.Getpid())
	for _, e := range ents {
		if e.Name() == self || e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(raw, []byte(marker)) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(raw), "\x00", " "))
		}
	}
	return found
}

// WantForksRefused checks a python fork bomb that ran rootless: the sentry
// refused a fork before the job's pids were exceeded.
func WantForksRefused(t *testing.T, res *runtime.Result, pids int) {
	t.Helper()
	var n int
	out := string(res.Stdout)
	i := strings.Index(out, "fork failed after ")
	if i < 0 {
		t.Errorf("no refused fork: reason %s exit %d\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, Clip(res.Stdout), Clip(res.Stderr))
		return
	}
	fmt.Sscanf(out[i:], "fork failed after %d", &n)
	if n < 1 || n >= pids {
		t.Errorf("forks refused after %d children, want fewer than the %d pids", n, pids)
	}
}
