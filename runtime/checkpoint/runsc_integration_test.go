//go:build integration

package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// TestRunscCheckpointStore takes a real runsc checkpoint of a sandbox that
// holds a /work file open into a Pending, commits it, and restores it from
// the Store onto a CopyTree of its /work: the layout and the checks of
// this package hold for what runsc writes, and a restore leaves the
// checkpoint's files as they were (a second fork can use them).
func TestRunscCheckpointStore(t *testing.T) {
	runsc, rootfs := sandboxPrereqs(t)
	state := os.Getenv("SKILLBOX_TEST_STATE")
	if state == "" {
		state = t.TempDir()
	} else {
		state = filepath.Join(state, "checkpoint")
	}
	must(t, os.MkdirAll(state, 0o700))
	// runsc --network=none mounts a null netns in its state dir and leaves it.
	t.Cleanup(func() { unix.Unmount(filepath.Join(state, "null-netns"), unix.MNT_DETACH) })
	version := runscVersion(t, runsc)
	base := []string{"--root", state, "--platform=systrap", "--network=none"}
	runscCmd := func(args ...string) (string, error) {
		out, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			return "", err
		}
		defer out.Close()
		// A file, not a pipe: the sandbox keeps runsc's stdio.
		cmd := exec.Command(runsc, append(append([]string{}, base...), args...)...)
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Run()
		b, _ := os.ReadFile(out.Name())
		return string(b), err
	}
	id1 := fmt.Sprintf("ckpt-it-%d-a", os.Getpid())
	id2 := fmt.Sprintf("ckpt-it-%d-b", os.Getpid())
	t.Cleanup(func() {
		for _, id := range []string{id1, id2} {
			runscCmd("delete", "--force", id)
		}
	})

	work1 := t.TempDir()
	must(t, os.Chmod(work1, 0o777|os.ModeSticky))
	b1 := bundle(t, rootfs, work1)
	if out, err := runscCmd("run", "--detach", "--bundle", b1, id1); err != nil {
		t.Fatalf("runsc run: %v\n%s", err, out)
	}
	waitLines(t, filepath.Join(work1, "count.log"), 3)

	s, err := Open(filepath.Join(t.TempDir(), "store"), 1<<30)
	must(t, err)
	p, err := s.Begin()
	must(t, err)
	defer p.Abort()
	start := time.Now()
	if out, err := runscCmd("checkpoint", "--image-path", p.ImageDir(), id1); err != nil {
		t.Fatalf("runsc checkpoint: %v\n%s", err, out)
	}
	t.Logf("checkpoint: %v", time.Since(start))
	skipped, err := CopyTree(work1, p.WorkDir())
	must(t, err)
	if len(skipped) > 0 {
		t.Fatalf("skipped %v", skipped)
	}
	copied := lines(t, filepath.Join(p.WorkDir(), "count.log"))
	m := Manifest{Session: "s-it", RunscVersion: version, Platform: "systrap", Network: "none",
		Image: "it", ImageDigest: "sha256:" + filepath.Base(rootfs), SpecDigest: "sha256:it"}
	ck, err := p.Commit(m)
	must(t, err)
	for _, f := range ck.Manifest().Files {
		t.Logf("%s %s %d %#o", f.Path, f.Type, f.Size, f.Mode)
	}

	start = time.Now()
	ck, err = s.Load(ck.ID())
	must(t, err)
	t.Logf("load (re-hash %d bytes): %v", ck.Manifest().TotalBytes, time.Since(start))
	want := Expect{RunscVersion: version, Platform: "systrap", Network: "none", ImageDigest: m.ImageDigest, SpecDigest: m.SpecDigest}
	must(t, ck.Verify(want))
	other := want
	other.RunscVersion = "release-0.0"
	var me *MismatchError
	if err := ck.Verify(other); !errors.As(err, &me) || me.Field != FieldRunscVersion {
		t.Fatalf("Verify with another runsc = %v", err)
	}

	work2 := filepath.Join(t.TempDir(), "work")
	_, err = CopyTree(ck.WorkDir(), work2)
	must(t, err)
	b2 := bundle(t, rootfs, work2)
	start = time.Now()
	if out, err := runscCmd("restore", "--detach", "--image-path", ck.ImageDir(), "--bundle", b2, id2); err != nil {
		t.Fatalf("runsc restore: %v\n%s", err, out)
	}
	t.Logf("restore: %v", time.Since(start))
	waitLines(t, filepath.Join(work2, "count.log"), copied+3)
	if got := lines(t, filepath.Join(work1, "count.log")); got != copied {
		t.Errorf("the checkpointed sandbox wrote on: %d lines, %d at the copy", got, copied)
	}
	// The restored sandbox counts on from where it was.
	b, _ := os.ReadFile(filepath.Join(work2, "count.log"))
	ls := strings.Fields(string(b))
	if ls[copied] != fmt.Sprint(copied+1) {
		t.Errorf("after the restore the count went on with %q, want %d", ls[copied], copied+1)
	}
	if _, err := s.Load(ck.ID()); err != nil {
		t.Errorf("the restore changed the checkpoint: %v", err)
	}
}

func sandboxPrereqs(t *testing.T) (runsc, rootfs string) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("SKILLBOX_TEST_REQUIRE_SANDBOXES") == "1" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("needs root (runsc checkpoint and restore)")
	}
	runsc = runtime.PinnedRunscPath()
	if _, err := os.Stat(runsc); err != nil {
		skip("no pinned runsc: %v", err)
	}
	images := os.Getenv("SKILLBOX_IMAGES")
	if images == "" {
		images = "/var/lib/skillbox/images"
	}
	dirs, _ := filepath.Glob(filepath.Join(images, "rootfs", "sha256-*"))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "bin", "sh")); err == nil {
			return runsc, d
		}
	}
	skip("no image rootfs with /bin/sh under %s", images)
	return "", ""
}

func runscVersion(t *testing.T, runsc string) string {
	out, err := exec.Command(runsc, "--version").Output()
	must(t, err)
	first, _, _ := strings.Cut(string(out), "\n")
	v := strings.TrimPrefix(first, "runsc version ")
	if v == first || v == "" {
		t.Fatalf("runsc --version said %q", out)
	}
	return v
}

// bundle writes a small spec: a shell that appends a count every 0.2s to
// /work/count.log, held open as fd 3 (so a restore needs the file).
func bundle(t *testing.T, rootfs, work string) string {
	dir := t.TempDir()
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"user": map[string]any{"uid": 65534, "gid": 65534},
			"args": []string{"/bin/sh", "-c", `exec 3>>/work/count.log; i=$(wc -l </work/count.log); while :; do i=$((i+1)); echo $i >&3; sleep 0.2; done`},
			"env":  []string{"PATH=/usr/bin:/bin"},
			"cwd":  "/work",
		},
		"root":     map[string]any{"path": rootfs, "readonly": true},
		"hostname": "ckpt",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}},
			{"destination": "/work", "type": "bind", "source": work, "options": []string{"rbind", "rw", "nosuid", "nodev"}},
		},
		"linux": map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "network"}}},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644))
	return dir
}

func lines(t *testing.T, p string) int {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

func waitLines(t *testing.T, p string, n int) {
	t.Helper()
	waitfor.NoError(t, fmt.Sprintf("%d lines in %s", n, p), 20*time.Second, func() error {
		if k := lines(t, p); k < n {
			b, _ := os.ReadFile(p)
			return fmt.Errorf("%d lines:\n%s", k, b)
		}
		return nil
	})
}
