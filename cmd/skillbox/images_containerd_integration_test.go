//go:build integration

package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/runtime"
	rtcontainerd "github.com/skillbox/skillbox/runtime/containerd"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// startContainerd starts a private containerd (hack/containerd.sh) for the
// test and returns its socket; it is stopped when the test ends.
func startContainerd(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("containerd"); err != nil {
		runtimetest.SkipUnlessRequired(t, "containerd is not installed: hack/install-deps.sh installs it")
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
	return filepath.Join(dir, "containerd.sock")
}

// ctrLs lists what containerd's CLI lists of kind (images, snapshots, ...)
// in skillbox's namespace.
func ctrLs(t *testing.T, sock string, kind ...string) string {
	t.Helper()
	args := append([]string{"--address", sock, "-n", rtcontainerd.DefaultNamespace}, kind...)
	out, err := exec.Command("ctr", append(args, "ls")...).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr %s ls: %v\n%s", strings.Join(kind, " "), err, out)
	}
	return string(out)
}

// With a config whose daemon runs on containerd, `skillbox images build`
// puts the image into containerd too (here: an image that is up to date in
// the store), and containerd's own CLI lists it.
func TestImagesBuildImportsIntoContainerd(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "shell")
	sock := startContainerd(t)
	cfg := filepath.Join(t.TempDir(), "skillbox.hcl")
	runItWriteFile(t, cfg, "daemon { runtime = \"containerd\" }\nruntime \"containerd\" { address = \""+sock+"\" }\n")

	o := runItExec(t, "images", "build", "--if-needed", "--dir", itImages, "--config", cfg, "shell")
	if o.code != 0 || !strings.Contains(o.stdout, rtcontainerd.ImageName("shell")) {
		t.Fatalf("images build with a containerd config:\n%s", o)
	}
	if out := ctrLs(t, sock, "images"); !strings.Contains(out, rtcontainerd.ImageName("shell")) {
		t.Errorf("ctr images ls:\n%s", out)
	}
}

// containerdRunConfig is a config for runs on the private containerd with
// gVisor: its own shim where it can start, else the runc v2 shim running
// the pinned runsc; extra is appended.
func containerdRunConfig(t *testing.T, sock, extra string) string {
	t.Helper()
	rt := "runtime \"containerd\" {\n  address = \"" + sock + "\"\n"
	if !rtcontainerd.HasCapSysResource() {
		rt += "  handler = \"" + rtcontainerd.HandlerRuncV2 + "\"\n  binary = \"" + runtime.PinnedRunscPath() + "\"\n"
	}
	cfg := filepath.Join(t.TempDir(), "skillbox.hcl")
	runItWriteFile(t, cfg, "daemon { runtime = \"containerd\" }\n"+rt+"}\n"+extra)
	return cfg
}

// A config image may name a registry reference instead of a recipe: the
// containerd backend pulls it (here from a registry serving the store's
// shell image on loopback, as an OCI distribution server) and runs the
// script on a snapshot of it; the image and its layers are containerd's.
// Another runtime refuses it, saying why; so does policy check; a registry
// that cannot be reached fails the run with a message saying so.
func TestRegistryImageOverContainerd(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "shell")
	sock := startContainerd(t)
	store, err := images.OpenStore(itImages, nil)
	if err != nil {
		t.Fatal(err)
	}
	img, err := store.Get("shell")
	if err != nil {
		t.Fatal(err)
	}
	reg := httptest.NewServer(registryHandler(t, store.LayoutDir(), "team/shell", "1", img.Digest))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	ref := host + "/team/shell:1"

	skill := filepath.Join(t.TempDir(), "reg")
	runItWriteFile(t, filepath.Join(skill, "SKILL.md"), "---\nname: reg\ndescription: runs in a registry image\n---\nbody\n")
	runItWriteFile(t, filepath.Join(skill, "scripts", "hi.rsh"), "echo \"hello from $(. /etc/os-release; echo $ID) $1\"\necho made > /work/outputs/made.txt\n")
	block := func(r string) string {
		return "image \"regsh\" {\n  ref = \"" + r + "\"\n  extensions = [\".rsh\"]\n  interpreter = [\"bash\"]\n}\n"
	}
	cfg := containerdRunConfig(t, sock, block(ref))

	o := runItExec(t, "run", "--config", cfg, skill, "scripts/hi.rsh", "--", "there")
	if o.code != 0 || o.stdout != "hello from debian there\n" {
		t.Fatalf("run in a registry image:\n%s", o)
	}
	if out := ctrLs(t, sock, "images"); !strings.Contains(out, ref) || !strings.Contains(out, img.Digest) {
		t.Errorf("the pulled image is not in containerd:\n%s", out)
	}
	if out := ctrLs(t, sock, "snapshots"); !strings.Contains(out, "Committed") || strings.Contains(out, "Active") {
		t.Errorf("want the image's layers and no run's snapshot left:\n%s", out)
	}
	// Once pulled, runs do not need the registry.
	reg.Close()
	if o := runItExec(t, "run", "--config", cfg, skill, "scripts/hi.rsh", "--", "again"); o.code != 0 || o.stdout != "hello from debian again\n" {
		t.Errorf("second run without the registry:\n%s", o)
	}

	o = runItExec(t, "run", "--config", cfg, "--runtime", "runsc", skill, "scripts/hi.rsh")
	runItWantError(t, "registry image on runsc", o, 1, "registry image "+ref, "containerd")

	o = runItExec(t, "policy", "check", filepath.Join(itRepo, "examples", "skillbox.hcl"))
	if o.code != 0 {
		t.Fatalf("policy check of the example config:\n%s", o)
	}
	runsc := filepath.Join(t.TempDir(), "runsc.hcl")
	runItWriteFile(t, runsc, block(ref))
	o = runItExec(t, "policy", "check", runsc)
	if o.code == 0 || !strings.Contains(o.stderr, "registry image "+ref) || !strings.Contains(o.stderr, "only \"containerd\"") {
		t.Errorf("policy check of a registry image on runsc:\n%s", o)
	}

	gone := containerdRunConfig(t, sock, block(host+"/team/absent:1"))
	o = runItExec(t, "run", "--config", gone, skill, "scripts/hi.rsh")
	runItWantError(t, "unreachable registry", o, 1, "pull "+host+"/team/absent:1", "registry reachable")
}

// registryHandler serves one image of an OCI layout as name:tag over the
// OCI distribution API's read side (what a pull uses).
func registryHandler(t *testing.T, layout, name, tag, manifest string) http.Handler {
	blob := func(d string) (string, bool) {
		algo, enc, ok := strings.Cut(d, ":")
		if !ok || algo != "sha256" || strings.ContainsAny(enc, "/.") {
			return "", false
		}
		return filepath.Join(layout, "blobs", algo, enc), true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "/v2/" || p == "/v2" {
			return
		}
		rest, ok := strings.CutPrefix(p, "/v2/"+name+"/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		kind, ref, _ := strings.Cut(rest, "/")
		if kind == "manifests" && ref == tag {
			ref = manifest
		}
		f, ok := blob(ref)
		if !ok || (kind != "manifests" && kind != "blobs") || (kind == "manifests" && ref != manifest) {
			http.NotFound(w, r)
			return
		}
		data, err := os.ReadFile(f)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		if kind == "manifests" {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
		}
		w.Header().Set("Docker-Content-Digest", ref)
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(data)
	})
}
