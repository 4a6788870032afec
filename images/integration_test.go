//go:build integration

package images

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// tLogWriter sends build progress to the test log.
type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func needBuildHost(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("integration: building images needs root (mmdebstrap root mode, device nodes, file ownership); run: sudo go test -tags integration ./images/")
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("integration: mmdebstrap is not installed; run: apt-get install mmdebstrap")
	}
}

func buildShell(t *testing.T) (*Image, string) {
	t.Helper()
	recipes, err := DefaultRecipes()
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(filepath.Join(t.TempDir(), "store"), hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: tLogWriter{t}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	img, root, err := s.Ensure(ctx, recipes["shell"], true, tLogWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shell image %s: %s compressed, %s unpacked, built and unpacked in %s",
		img.Digest, HumanSize(img.Size), HumanSize(img.UnpackedSize), time.Since(start).Round(time.Second))
	return img, root
}

// TestIntegrationShellImage builds the real shell image (the smallest) and
// runs it with chroot. With SKILLBOX_REPRO=1 it builds a second time into a
// fresh store and compares digests.
//
// Reproducibility, as measured on a Debian 12 host with mmdebstrap 1.3.5: two
// builds of the shell image against the same archive state give the same layer and
// manifest digests. What makes that hold: SOURCE_DATE_EPOCH (the Release
// date) clamps every timestamp, mmdebstrap removes its logs and caches and
// sorts the tarball, the customize hook drops the build host's /etc/hostname
// and empties /etc/resolv.conf, the chroot is always built where the _apt
// user can reach it (chrootTmp) — the owner of /var/lib/apt/lists/partial in
// the image records whether apt could drop to _apt for downloads, and was the
// one difference seen between a store below a 0700 directory and
// /var/lib/skillbox/images before that — and writeLayer rewrites headers (no
// atime, ctime, user names) and compresses with a zero gzip header. What
// breaks it:
// any change in the archive between the two builds (a point release, a
// security update — the security suite moves weekly), since the Release date
// and package versions change with it; a different mmdebstrap, dpkg or Go
// version (gzip output is only stable for one version of klauspost/compress).
func TestIntegrationShellImage(t *testing.T) {
	needBuildHost(t)
	img, root := buildShell(t)

	for _, p := range []string{"skill", "skills", "work", "usr/bin/bash", "usr/bin/jq", "usr/bin/gawk", "usr/bin/sed", "usr/bin/grep",
		"usr/bin/curl", "usr/bin/git", "usr/bin/zip", "usr/bin/unzip", "etc/ssl/certs/ca-certificates.crt"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s missing: %v", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(root, "bin")); err != nil || l != "usr/bin" {
		t.Errorf("merged /usr: bin -> %q (%v)", l, err)
	}
	for _, p := range []string{"usr/bin/node", "usr/bin/npm"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s missing: %v", p, err)
		}
	}
	// Lean: no apt, no docs or man pages (git brings full perl; npm's
	// node-gyp brings python3), no office suite.
	for _, p := range []string{"usr/bin/soffice", "usr/bin/apt-get", "usr/share/man/man1", "usr/share/doc/bash/README", "etc/hostname"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s should not be in the shell image", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/resolv.conf")); err != nil || len(b) != 0 {
		t.Errorf("/etc/resolv.conf should exist and be empty: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/hosts")); err != nil || !strings.Contains(string(b), "127.0.0.1\tlocalhost\n") ||
		!strings.Contains(string(b), "::1\tlocalhost") {
		t.Errorf("/etc/hosts should name localhost for 127.0.0.1 and ::1: %q %v", b, err)
	}
	out, err := exec.Command("chroot", root, "/bin/bash", "-c", `echo '{"a":[1,2,3]}' | jq '.a | add' | gawk '{print $1 * 2}'`).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "12" {
		t.Errorf("running bash|jq|gawk in the rootfs: %q %v", out, err)
	}
	if img.Stale || len(img.Interpreters) == 0 || img.Interpreters[0] != "bash" {
		t.Errorf("image metadata: %+v", img)
	}

	if os.Getenv("SKILLBOX_REPRO") != "1" {
		t.Log("set SKILLBOX_REPRO=1 to also build a second time and compare digests")
		return
	}
	img2, _ := buildShell(t)
	if img2.Layers[0] != img.Layers[0] || img2.Digest != img.Digest {
		t.Errorf("two builds differ: layer %s vs %s, manifest %s vs %s (did the archive change in between? compare Created: %v vs %v)",
			img.Layers[0], img2.Layers[0], img.Digest, img2.Digest, img.Created, img2.Created)
	}
}
