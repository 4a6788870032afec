package runner_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/core/runner"
)

// dangerousEnv reads testdata/dangerous_env.txt: the 75 names of the
// hostile review, none of which a run may be given by default.
func dangerousEnv(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("testdata/dangerous_env.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			names = append(names, l)
		}
	}
	if len(names) != 75 {
		t.Fatalf("testdata/dangerous_env.txt has %d names, want 75", len(names))
	}
	return names
}

// The environment is an allowlist; none of the dangerous names
// gets through the default policy.
func TestPrepareRefusesDangerousEnvByDefault(t *testing.T) {
	e, _ := newTestEngine(t, engineConfig)
	sk := engineSkill(t, "tool")
	for _, name := range dangerousEnv(t) {
		t.Run(name, func(t *testing.T) {
			_, err := e.Prepare(runner.RunRequest{Skill: sk, Script: "scripts/a.py", Env: map[string]string{name: "x"}})
			if err == nil {
				t.Fatalf("env %s was accepted", name)
			}
			if !strings.Contains(err.Error(), name) && !strings.Contains(err.Error(), "valid name") {
				t.Errorf("error does not name %s: %v", name, err)
			}
		})
	}
	// The documented defaults still pass.
	if _, err := e.Prepare(runner.RunRequest{Skill: sk, Script: "scripts/a.py", Env: map[string]string{"LANG": "de_DE.UTF-8", "TZ": "UTC", "PYTHONUNBUFFERED": "1"}}); err != nil {
		t.Fatalf("default env names: %v", err)
	}
}

// Snapshot directories are not reachable by a path made from a
// digest, and their directory cannot be listed by others.
func TestSnapshotPathsAreNotGuessable(t *testing.T) {
	s := newSnapshotStore(t)
	sk := snapshotSkill(t, "print(1)\n")
	root, err := s.Pin(sk)
	if err != nil {
		t.Fatal(err)
	}
	if hex := strings.TrimPrefix(sk.Digest, "sha256:"); strings.Contains(filepath.Base(root), hex) {
		t.Errorf("snapshot %s is named by the skill's digest", root)
	}
	st, err := os.Stat(s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o044 != 0 {
		t.Errorf("snapshot dir %s is %v: others can list it", s.Dir, st.Mode().Perm())
	}
}
