//go:build integration

package main

// End-to-end tests of `skillbox run --workdir`: a real runsc sandbox works
// on a host directory through copy in, apply back, with a canary outside
// the workspace that nothing may read or change.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

var wsScripts = map[string]string{
	// work.sh uses what it was given and changes the workspace every way
	// a script can: a changed file, a new one in a new directory, a
	// deletion, and a symlink pointing out of it.
	"scripts/work.sh": `set -e
cat input.txt
echo "env=$([ -e .env ] && echo yes || echo no) key=$([ -e server.key ] && echo yes || echo no) pipe=$([ -e pipe ] && echo yes || echo no) canary=$([ -e ../canary.txt ] && echo yes || echo no)"
echo changed > sub/data.csv
mkdir -p out
echo made > out/new.txt
rm del.txt
ln -s /etc/passwd escape
`,
	// wait.sh says it is running, gives the host time to change race.txt,
	// then writes it too.
	"scripts/wait.sh": `echo ready
sleep 4
echo from-run > race.txt
`,
	"scripts/ls.sh": "find . -type f | sort\n",
}

type wsFixture struct {
	base, root, project, canary, cfg, auditDir string
}

func newWSFixture(t *testing.T) *wsFixture {
	t.Helper()
	base, err := os.MkdirTemp("", "sbws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept %s for inspection", base)
			return
		}
		os.RemoveAll(base)
	})
	f := &wsFixture{base: base, root: filepath.Join(base, "skills"), project: filepath.Join(base, "project"),
		canary: filepath.Join(base, "canary.txt"), auditDir: filepath.Join(base, "audit")}
	files := map[string]string{"SKILL.md": "---\nname: ws-tests\ndescription: Test skill for workspace integration tests. Use only in tests.\n---\n# ws-tests\n"}
	for p, s := range wsScripts {
		files[p] = s
	}
	for p, s := range files {
		runItWriteFile(t, filepath.Join(f.root, "ws-tests", p), s)
	}
	runItWriteFile(t, f.canary, "canary: never read, never changed\n")
	f.cfg = filepath.Join(base, "ws.hcl")
	runItWriteFile(t, f.cfg, fmt.Sprintf(`daemon {
  audit_dir = %q
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
}
policy "ws" {
  skills           = ["ws-tests"]
  workspace        = "write"
  workspace_delete = true
}
`, f.auditDir))
	for _, d := range []string{f.root, base} {
		filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	}
	return f
}

// newProject writes a fresh project directory.
func (f *wsFixture) newProject(t *testing.T) {
	t.Helper()
	os.RemoveAll(f.project)
	for p, s := range map[string]string{
		"input.txt":    "payload-42\n",
		"sub/data.csv": "a,b\n",
		"del.txt":      "delete me\n",
		"race.txt":     "original\n",
		".env":         "SECRET=1\n",
		"server.key":   "-----BEGIN PRIVATE KEY-----\n",
	} {
		runItWriteFile(t, filepath.Join(f.project, p), s)
	}
	if err := syscall.Mkfifo(filepath.Join(f.project, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.canary, filepath.Join(f.project, "out-link")); err != nil {
		t.Fatal(err)
	}
}

// run is `skillbox run` on the test image store.
func (f *wsFixture) run(t *testing.T, args ...string) runOut {
	t.Helper()
	return runItExec(t, append([]string{"run"}, args...)...)
}

func (f *wsFixture) checkCanary(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(f.canary); err != nil || string(b) != "canary: never read, never changed\n" {
		t.Errorf("the canary outside the workspace changed: %q %v", b, err)
	}
}

func wsResult(t *testing.T, o runOut) api.RunScriptResult {
	t.Helper()
	var r api.RunScriptResult
	if err := json.Unmarshal([]byte(o.stdout), &r); err != nil {
		t.Fatalf("--json output: %v\n%s", err, o)
	}
	if r.Workspace == nil {
		t.Fatalf("no workspace report\n%s", o)
	}
	return r
}

func TestRunWorkdir(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "shell")
	f := newWSFixture(t)

	t.Run("changes come back, nothing else", func(t *testing.T) {
		f.newProject(t)
		o := f.run(t, "--config", f.cfg, "--root", f.root, "--runtime", "runsc", "--workdir", f.project, "--json", "ws-tests", "scripts/work.sh")
		if o.code != 0 {
			t.Fatalf("want exit 0\n%s", o)
		}
		r := wsResult(t, o)
		if !strings.Contains(r.Stdout, "payload-42") || !strings.Contains(r.Stdout, "env=no key=no pipe=no canary=no") {
			t.Errorf("the run saw the wrong files: %q", r.Stdout)
		}
		for p, want := range map[string]string{"sub/data.csv": "changed\n", "out/new.txt": "made\n", "input.txt": "payload-42\n", ".env": "SECRET=1\n"} {
			if b, err := os.ReadFile(filepath.Join(f.project, p)); err != nil || string(b) != want {
				t.Errorf("%s on the host: %q %v, want %q", p, b, err, want)
			}
		}
		if _, err := os.Lstat(filepath.Join(f.project, "del.txt")); !os.IsNotExist(err) {
			t.Errorf("del.txt was not deleted: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(f.project, "escape")); !os.IsNotExist(err) {
			t.Errorf("the run's symlink came back to the host: %v", err)
		}
		ws := r.Workspace
		if ws.Mode != api.WorkspaceWrite || len(ws.Written) != 2 || len(ws.Deleted) != 1 || len(ws.Conflicts) != 0 {
			t.Errorf("report %+v", ws)
		}
		refused := fmt.Sprint(ws.Refused)
		for _, w := range []string{"pipe", "out-link"} {
			if !strings.Contains(refused, w) {
				t.Errorf("refused %s does not name %s", refused, w)
			}
		}
		if !strings.Contains(strings.Join(r.OutputsSkipped, "\n"), "escape") {
			t.Errorf("the run's symlink is not reported: %q", r.OutputsSkipped)
		}
		if ws.Excluded < 2 {
			t.Errorf("excluded %d, want .env and server.key", ws.Excluded)
		}
		f.checkCanary(t)
		// The audit log has every file in and out with its sha256.
		recs := readAuditRecords(t, f.auditDir)
		var in, out bool
		for _, rec := range recs {
			if rec.Run == nil || rec.Run.Workspace == nil {
				continue
			}
			if rec.Event == audit.EventRunStart && len(rec.Run.WorkspaceFiles) > 0 {
				in = true
			}
			if rec.Event == audit.EventRunEnd && len(rec.Run.Workspace.Written) == 2 && rec.Run.Workspace.Written[0].After != "" {
				out = true
			}
		}
		if !in || !out {
			t.Errorf("audit: files in %v, changes out %v", in, out)
		}
	})

	t.Run("a host change during the run is a conflict", func(t *testing.T) {
		f.newProject(t)
		ctx, cancel := context.WithTimeout(context.Background(), runItCallLimit)
		defer cancel()
		cmd := exec.CommandContext(ctx, itBin, "run", "--config", f.cfg, "--root", f.root, "--runtime", "runsc", "--workdir", f.project, "--input", "race.txt", "ws-tests", "scripts/wait.sh")
		cmd.Env = append(os.Environ(), "SKILLBOX_IMAGES="+itImages)
		stdout, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() && sc.Text() != "ready" {
		}
		runItWriteFile(t, filepath.Join(f.project, "race.txt"), "from-host\n")
		for sc.Scan() {
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) || ee.ExitCode() != exitOutputsTruncated {
			t.Errorf("want exit %d on a conflict, got %v\n%s", exitOutputsTruncated, err, stderr.String())
		}
		if b, _ := os.ReadFile(filepath.Join(f.project, "race.txt")); string(b) != "from-host\n" {
			t.Errorf("the host's change was overwritten: %q", b)
		}
		if !strings.Contains(stderr.String(), "conflict") || !strings.Contains(stderr.String(), "race.txt") {
			t.Errorf("the conflict is not reported:\n%s", stderr.String())
		}
		f.checkCanary(t)
	})

	t.Run("a host directory is read-only by default", func(t *testing.T) {
		f.newProject(t)
		cfg := filepath.Join(f.base, "ro.hcl")
		runItWriteFile(t, cfg, "policy \"default\" {\n  skills = [\"*\"]\n  tools  = [\"skills.run_script\"]\n}\n")
		o := f.run(t, "--config", cfg, "--root", f.root, "--runtime", "runsc", "--workdir", f.project, "--json", "ws-tests", "scripts/work.sh")
		r := wsResult(t, o)
		if r.Workspace.Mode != api.WorkspaceRead || r.Workspace.NotApplied == "" || len(r.Workspace.Written) != 0 {
			t.Errorf("report %+v", r.Workspace)
		}
		if b, _ := os.ReadFile(filepath.Join(f.project, "sub/data.csv")); string(b) != "a,b\n" {
			t.Errorf("a read-only workspace was written: %q", b)
		}
		if _, err := os.Stat(filepath.Join(f.project, "del.txt")); err != nil {
			t.Errorf("a read-only workspace lost a file: %v", err)
		}
	})

	t.Run("inputs name what goes in", func(t *testing.T) {
		f.newProject(t)
		o := f.run(t, "--config", f.cfg, "--root", f.root, "--runtime", "runsc", "--workdir", f.project, "--input", "sub/**", "--json", "ws-tests", "scripts/ls.sh")
		r := wsResult(t, o)
		if strings.TrimSpace(r.Stdout) != "./sub/data.csv" {
			t.Errorf("the run saw %q, want only sub/data.csv", r.Stdout)
		}
		for _, bad := range []string{"../canary.txt", "/etc/passwd", "nothing-here"} {
			o := f.run(t, "--config", f.cfg, "--root", f.root, "--runtime", "runsc", "--workdir", f.project, "--input", bad, "ws-tests", "scripts/ls.sh")
			if o.code == 0 || !strings.Contains(o.stderr, "skillbox: ") {
				t.Errorf("--input %s: want a refusal\n%s", bad, o)
			}
		}
		f.checkCanary(t)
	})
}

// readAuditRecords reads every record of the audit log in dir.
func readAuditRecords(t *testing.T, dir string) []audit.Record {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
	var out []audit.Record
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r audit.Record
			if json.Unmarshal([]byte(line), &r) == nil {
				out = append(out, r)
			}
		}
	}
	return out
}
