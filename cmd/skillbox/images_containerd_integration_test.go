//go:build integration

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rtcontainerd "github.com/skillbox/skillbox/runtime/containerd"
)

// With a config whose daemon runs on containerd, `skillbox images build`
// puts the image into containerd too (here: an image that is up to date in
// the store), and containerd's own CLI lists it.
func TestImagesBuildImportsIntoContainerd(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "shell")
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Skip("containerd is not installed: hack/install-deps.sh installs it")
	}
	dir, err := os.MkdirTemp("", "sbcd-") // short: the socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(itRepo, "hack", "containerd.sh")
	if out, err := exec.Command(script, "start", dir).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("hack/containerd.sh start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("hack/containerd.sh stop: %v\n%s", err, out)
		}
	})
	sock := filepath.Join(dir, "containerd.sock")
	cfg := filepath.Join(t.TempDir(), "skillbox.hcl")
	runItWriteFile(t, cfg, "daemon { runtime = \"containerd\" }\nruntime \"containerd\" { address = \""+sock+"\" }\n")

	o := runItExec(t, "images", "build", "--if-needed", "--dir", itImages, "--config", cfg, "shell")
	if o.code != 0 || !strings.Contains(o.stdout, rtcontainerd.ImageName("shell")) {
		t.Fatalf("images build with a containerd config:\n%s", o)
	}
	out, err := exec.Command("ctr", "--address", sock, "-n", rtcontainerd.DefaultNamespace, "images", "ls", "-q").CombinedOutput()
	if err != nil || !strings.Contains(string(out), rtcontainerd.ImageName("shell")) {
		t.Errorf("ctr images ls: %v\n%s", err, out)
	}
}
