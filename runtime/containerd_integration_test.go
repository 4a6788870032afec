//go:build integration

package runtime_test

// The containerd backend runs the same tables as runsc and runc, against a
// private containerd (Debian's package) that hack/containerd.sh starts once
// under the test state dir and TestMain stops. The handler is gVisor's shim
// unless SKILLBOX_TEST_CONTAINERD_HANDLER names another
// (io.containerd.runc.v2, with SKILLBOX_TEST_CONTAINERD_BINARY as the OCI
// runtime it runs).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/runtime"
	rtcontainerd "github.com/skillbox/skillbox/runtime/containerd"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/process"
	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

var (
	containerdOnce    sync.Once
	containerdErr     error
	containerdStarted bool
)

// containerdDir is the private daemon's directory (short: its socket path
// must fit in 108 bytes).
func containerdDir() string { return filepath.Join(testBase, "cd") }

func containerdSock() string { return filepath.Join(containerdDir(), "containerd.sock") }

// containerdAddress starts the private containerd once and returns its socket.
func containerdAddress(t testing.TB) string {
	t.Helper()
	containerdOnce.Do(func() {
		script, _ := filepath.Abs("../hack/containerd.sh")
		out, err := exec.Command(script, "start", containerdDir()).CombinedOutput()
		if err != nil {
			containerdErr = err
			t.Logf("%s start: %s", script, out)
			return
		}
		containerdStarted = true
		if ownsTestBase {
			sweepContainerdLeftovers()
		}
	})
	if containerdErr != nil {
		t.Fatalf("starting a private containerd with hack/containerd.sh failed: %v", containerdErr)
	}
	return containerdSock()
}

// sweepContainerdLeftovers removes, once the private containerd is up, what
// killed test processes of this checkout left in it (a container, its
// lease, snapshot and run dir), the way clearLeftovers does for runsc and
// runc: a test that checks containerd is left clean must not fail on an
// earlier process's crash.
func sweepContainerdLeftovers() {
	opts := baseOptions(rtcontainerd.Name)
	withContainerd(nil, rtcontainerd.Name, &opts)
	rt, err := runtime.New(rtcontainerd.Name, opts)
	if err == nil {
		err = runtime.Sweep(context.Background(), rt)
		_ = rt.(runtime.Lifecycle).Close(context.Background())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sweeping containerd leftovers of earlier test processes: %v\n", err)
	}
}

// stopContainerd stops the private containerd, if these tests started it.
func stopContainerd() {
	if !containerdStarted {
		return
	}
	script, _ := filepath.Abs("../hack/containerd.sh")
	if out, err := exec.Command(script, "stop", containerdDir()).CombinedOutput(); err != nil {
		os.Stderr.WriteString("hack/containerd.sh stop: " + err.Error() + ": " + string(out))
	}
}

// runtimeBinary is the "binary" setting for a backend: for containerd, the OCI
// runtime its handler runs (the handler's default unless set).
func runtimeBinary(name string) string {
	if name == rtcontainerd.Name {
		_, bin := containerdHandler()
		return bin
	}
	return binaryOf(name)
}

// withContainerd points containerd's options at the private daemon.
func withContainerd(t testing.TB, name string, opts *runtime.Options) {
	if name != rtcontainerd.Name {
		return
	}
	handler, binary := containerdHandler()
	opts.Settings["address"], opts.Settings["namespace"] = containerdSock(), rtcontainerd.DefaultNamespace
	opts.Settings["handler"], opts.Settings["binary"] = handler, binary
}

// containerdHandler is the handler and binary the tests use: the
// environment's, else gVisor's shim, or where root lacks the capability
// that shim needs, the runc v2 shim running the pinned runsc (gVisor all
// the same).
func containerdHandler() (handler, binary string) {
	if h := os.Getenv("SKILLBOX_TEST_CONTAINERD_HANDLER"); h != "" {
		return h, os.Getenv("SKILLBOX_TEST_CONTAINERD_BINARY")
	}
	if rtcontainerd.HasCapSysResource() {
		return rtcontainerd.HandlerRunsc, ""
	}
	return rtcontainerd.HandlerRuncV2, binaryOf("runsc")
}

// ctr runs containerd's CLI against the private daemon in skillbox's
// namespace.
func ctr(args ...string) (string, error) {
	out, err := exec.Command("ctr", append([]string{"--address", containerdSock(), "-n", rtcontainerd.DefaultNamespace}, args...)...).CombinedOutput()
	return string(out), err
}

// listContainers lists the containers a backend knows, one id a line.
func listContainers(name string, opts runtime.Options) (string, error) {
	if name == rtcontainerd.Name {
		return ctr("containers", "ls", "-q")
	}
	out, err := exec.Command(binaryOf(name), "--root", opts.Settings.String("state_dir"), "list", "--quiet").CombinedOutput()
	return string(out), err
}

// assertContainerdClean checks that nothing but images and their content
// is left in the namespace: no task, no lease, no snapshot but the
// committed layers of unpacked images.
func assertContainerdClean(t *testing.T, name string, opts runtime.Options) {
	t.Helper()
	if name != rtcontainerd.Name {
		return
	}
	for _, what := range [][]string{{"tasks", "ls", "-q"}, {"leases", "ls", "-q"}, {"snapshots", "ls"}} {
		out, err := ctr(what...)
		if err != nil {
			t.Errorf("ctr %s: %v %s", strings.Join(what, " "), err, out)
			continue
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if what[0] == "snapshots" && len(lines) > 0 {
			lines = lines[1:] // the header
		}
		var left []string
		for _, l := range lines {
			if what[0] == "snapshots" && strings.HasSuffix(strings.TrimSpace(l), "Committed") {
				continue // an image's layer
			}
			if strings.TrimSpace(l) != "" {
				left = append(left, l)
			}
		}
		if len(left) > 0 {
			t.Errorf("%s left in containerd: %v", what[0], left)
		}
	}
}

// kernelOf is "runsc" when a backend's scripts talk to gVisor, "runc" when
// they talk to the host's kernel.
func kernelOf(name string) string {
	if name != rtcontainerd.Name {
		return name
	}
	h, bin := containerdHandler()
	if h == rtcontainerd.HandlerRunsc || strings.Contains(filepath.Base(bin), "runsc") {
		return "runsc"
	}
	return "runc"
}

// TestPoolOverContainerd: the warm pool boots sandboxes through the
// containerd backend (python in the supervisor, shell exec'd into a
// holder), runs a job in each warm, and leaves nothing in containerd once
// closed.
func TestPoolOverContainerd(t *testing.T) {
	rootfs := testRootfs(t)
	rt, opts := newBackend(t, rtcontainerd.Name)
	lc := rt.(runtime.Lifecycle)
	dir := makeSkill(t, map[string]string{
		"scripts/hello.py": "import sys\nprint('hello', sys.argv[1])\n",
		"scripts/hello.sh": "echo hello \"$1\"\n",
	})
	for _, args := range [][]string{{"python3", "/skill/scripts/hello.py", "warm"}, {"bash", "/skill/scripts/hello.sh", "warm"}} {
		t.Run(args[0], func(t *testing.T) {
			pool := runtime.NewPool(lc, runtime.PoolConfig{PerKey: 1, Total: 1, IdleTimeout: time.Minute}, nil)
			defer func() {
				if err := pool.Close(context.Background()); err != nil {
					t.Error(err)
				}
			}()
			job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: dir}, Invocation: runtime.Invocation{Args: args, Limits: runtime.Limits{Timeout: time.Minute}}}
			key := bootWarm(t, pool, job, "hello")
			res, err := pool.Run(context.Background(), key, job)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Warm || string(res.Stdout) != "hello warm\n" || res.ExitCode != 0 || res.Runtime != rtcontainerd.Name {
				t.Errorf("warm %v exit %d stdout %q runtime %s (stderr %q)", res.Warm, res.ExitCode, res.Stdout, res.Runtime, res.Stderr)
			}
		})
	}
	if err := lc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, _ := listContainers(rtcontainerd.Name, opts)
	if strings.TrimSpace(out) != "" {
		t.Errorf("containers left after the pool closed: %s", out)
	}
	assertContainerdClean(t, rtcontainerd.Name, opts)
}

// TestImportImage imports an image of the store into containerd (twice:
// the second finds its blobs there) and finds it in `ctr images ls`.
func TestImportImage(t *testing.T) {
	needBackend(t, rtcontainerd.Name)
	store, img := storeImage(t)
	_, opts := newBackend(t, rtcontainerd.Name)
	cd, err := rtcontainerd.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cd.Close(context.Background())
	for i := 0; i < 2; i++ {
		name, err := cd.ImportImage(context.Background(), store.LayoutDir(), img.Name, img.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if name != rtcontainerd.ImageName(img.Name) {
			t.Errorf("imported as %s", name)
		}
	}
	out, err := ctr("images", "ls")
	if err != nil || !strings.Contains(out, rtcontainerd.ImageName(img.Name)) || !strings.Contains(out, img.Digest) {
		t.Errorf("ctr images ls: %v\n%s", err, out)
	}
	// The content is complete: containerd can check every blob.
	if out, err := ctr("images", "check"); err != nil || !strings.Contains(out, "complete") {
		t.Errorf("ctr images check: %v\n%s", err, out)
	}
	if _, err := cd.PullImage(context.Background(), "registry.invalid/skillbox/none:1"); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "registry") {
		t.Errorf("pull from an unreachable registry: %v, want ErrUnavailable saying so", err)
	}
}

// storeImageRef is storeImage as a job names it, and its rootfs.
func storeImageRef(t *testing.T) (runtime.ImageRef, string) {
	t.Helper()
	store, img := storeImage(t)
	rootfs, err := store.RootFS(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.ImageRef{Name: img.Name, Digest: img.Digest, Layout: store.LayoutDir()}, rootfs
}

// removeImage removes skillbox image name from containerd, if it is there.
func removeImage(t *testing.T, name string) {
	t.Helper()
	if out, err := ctr("images", "rm", rtcontainerd.ImageName(name)); err != nil && !strings.Contains(out, "not found") {
		t.Fatalf("ctr images rm: %v %s", err, out)
	}
}

// storeImage is the smallest image of the image store the tests use, or
// a skip when there is none.
func storeImage(t *testing.T) (*images.Store, *images.Image) {
	t.Helper()
	dir := os.Getenv("SKILLBOX_IMAGES")
	if dir == "" {
		dir = images.DefaultDir
	}
	store, err := images.OpenStore(dir, nil)
	if err != nil {
		runtimetest.SkipUnlessRequired(t, "no image store at %s: %v", dir, err)
	}
	imgs, err := store.List()
	if err != nil || len(imgs) == 0 {
		runtimetest.SkipUnlessRequired(t, "no built image in %s (skillbox images build shell): %v", dir, err)
	}
	img := imgs[0]
	for _, im := range imgs {
		if im.Size < img.Size {
			img = im
		}
	}
	return store, img
}

// TestContainerdRunsFromSnapshot: a job that names its image runs on a
// snapshot of that image in containerd, imported on demand when the
// namespace lacks it; the rootfs is read-only; cold and warm (exec) both;
// the snapshot goes with the sandbox, the image's layers stay.
func TestContainerdRunsFromSnapshot(t *testing.T) {
	needBackend(t, rtcontainerd.Name)
	ref, rootfs := storeImageRef(t)
	rt, opts := newBackend(t, rtcontainerd.Name)
	defer rt.(runtime.Lifecycle).Close(context.Background())
	// Imported on demand: the namespace starts without the image.
	removeImage(t, ref.Name)
	script := "echo from-snapshot; if touch /probe 2>/dev/null; then echo rootfs-writable; fi; echo out > /work/out.txt; exit 3"
	t.Run("cold", func(t *testing.T) {
		job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: newID(), RootFS: rootfs, Image: ref}, Invocation: runtime.Invocation{Args: []string{"/bin/sh", "-c", script}, Limits: runtime.Limits{Timeout: time.Minute}}}
		res, err := rt.Run(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 3 || string(res.Stdout) != "from-snapshot\n" {
			t.Errorf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		if len(res.Outputs) != 1 || res.Outputs[0].Path != "out.txt" {
			t.Errorf("outputs %+v", res.Outputs)
		}
	})
	out, err := ctr("images", "ls", "-q")
	if err != nil || !strings.Contains(out, rtcontainerd.ImageName(ref.Name)) {
		t.Errorf("the image was not imported on demand: %v %s", err, out)
	}
	t.Run("warm", func(t *testing.T) {
		lc := rt.(runtime.Lifecycle)
		spec := runtime.SandboxSpec{ID: newID(), RootFS: rootfs, Image: ref, Limits: runtime.Limits{Timeout: time.Minute}.WithDefaults(), Boot: runtime.BootExec}
		sb, err := lc.Create(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy(context.Background())
		if err := sb.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		info, err := ctr("containers", "info", spec.ID)
		if err != nil || !strings.Contains(info, `"SnapshotKey": "`+spec.ID+`"`) || !strings.Contains(info, rtcontainerd.ImageName(ref.Name)) {
			t.Errorf("the container is not on a snapshot of %s: %v\n%s", ref.Name, err, info)
		}
		if err := sb.Deliver(context.Background(), runtime.Invocation{Args: []string{"/bin/sh", "-c", script}, Limits: runtime.Limits{Timeout: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		res, err := sb.Wait(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !res.Warm || res.ExitCode != 3 || string(res.Stdout) != "from-snapshot\n" {
			t.Errorf("warm %v exit %d stdout %q stderr %q", res.Warm, res.ExitCode, res.Stdout, res.Stderr)
		}
		if err := sb.Destroy(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	// A dependency layer is one more layer of the image in containerd,
	// not a bind mount: its files are in the rootfs, read-only.
	t.Run("deps", func(t *testing.T) {
		hexd := randomHex(32)
		tree := filepath.Join(t.TempDir(), "layers", "sha256-"+hexd, "tree")
		if err := os.MkdirAll(filepath.Join(tree, "python", "pkg"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, "python", "pkg", "data.txt"), []byte("from the layer\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("pkg/data.txt", filepath.Join(tree, "python", "link.txt")); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ { // the second run finds the image made
			job := runtime.Job{
				Sandbox:    runtime.SandboxSpec{ID: newID(), RootFS: rootfs, Image: ref, DepsDir: tree},
				Invocation: runtime.Invocation{Limits: runtime.Limits{Timeout: time.Minute}, Args: []string{"/bin/sh", "-c", "cat /opt/python/link.txt; grep -c ' /opt ' /proc/self/mountinfo; touch /opt/python/x 2>/dev/null && echo writable; true"}},
			}
			res, err := rt.Run(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 || string(res.Stdout) != "from the layer\n0\n" {
				t.Errorf("run %d: exit %d stdout %q stderr %q", i, res.ExitCode, res.Stdout, res.Stderr)
			}
		}
		if out, err := ctr("images", "ls", "-q"); err != nil || !strings.Contains(out, ":deps-"+hexd[:32]) {
			t.Errorf("no image with the layer in containerd: %v\n%s", err, out)
		}
	})
	// A run that dies with its process leaves its container on its
	// snapshot; the next start's sweep removes both.
	t.Run("crash", func(t *testing.T) {
		id := newID()
		crashMidRun(t, crashCommand(rtcontainerd.Name, opts, id, rootfs, "-", "skillbox-marker-"+randomHex(8), "image-up",
			ref.Name, ref.Digest, ref.Layout))
		if snaps, _ := ctr("snapshots", "ls"); !strings.Contains(snaps, id) {
			t.Fatalf("the crashed run left no snapshot %s:\n%s", id, snaps)
		}
		if err := runtime.Sweep(context.Background(), rt); err != nil {
			t.Fatalf("Sweep: %v", err)
		}
	})
	if out, _ := listContainers(rtcontainerd.Name, opts); strings.TrimSpace(out) != "" {
		t.Errorf("containers left: %s", out)
	}
	assertContainerdClean(t, rtcontainerd.Name, opts)
	if out, err := ctr("snapshots", "ls"); err != nil || !strings.Contains(out, "Committed") {
		t.Errorf("the image's layers should stay unpacked: %v\n%s", err, out)
	}
}

// TestContainerdImportRightAfterRemove: an image removed from containerd
// (its blobs left to the garbage collector, which runs at once after a
// removal) and run again straight away is imported again whole: every blob
// the import finds still there is held by the import's lease, so the
// collector cannot take one before the image that refers to it exists.
func TestContainerdImportRightAfterRemove(t *testing.T) {
	needBackend(t, rtcontainerd.Name)
	ref, rootfs := storeImageRef(t)
	for i := 0; i < 6; i++ {
		t.Run(fmt.Sprint("round ", i), func(t *testing.T) {
			removeImage(t, ref.Name)
			rt, _ := newBackend(t, rtcontainerd.Name)
			defer rt.(runtime.Lifecycle).Close(context.Background())
			job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: newID(), RootFS: rootfs, Image: ref}, Invocation: runtime.Invocation{Args: []string{"/bin/sh", "-c", "echo ok"}, Limits: runtime.Limits{Timeout: time.Minute}}}
			res, err := rt.Run(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 || string(res.Stdout) != "ok\n" {
				t.Errorf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
		})
	}
}

// A pooled containerd sandbox, booted and idle, once
// outlived the process that made it (the task lives in its shim) until a
// Sweep. Its watchdog now removes it as soon as that process is gone, with
// no Sweep: task, container, snapshot, lease, shim, cgroup and run dir,
// and then the watchdog itself.
func TestContainerdIdleSandboxDiesWithItsDaemon(t *testing.T) {
	rootfs := testRootfs(t)
	name := rtcontainerd.Name
	_, opts := newBackend(t, name)
	dir := makeSkill(t, map[string]string{"scripts/idle.py": "print('idle')\n"})
	id := newID()
	crashMidRun(t, crashCommand(name, opts, id, rootfs, dir, "skillbox-marker-"+randomHex(8), "warm-idle"))
	crashed := time.Now()
	left := func() []string {
		var out []string
		if l, _ := ctr("tasks", "ls", "-q"); strings.Contains(l, id) {
			out = append(out, "task")
		}
		if l, _ := ctr("containers", "ls", "-q"); strings.Contains(l, id) {
			out = append(out, "container")
		}
		if l, _ := ctr("snapshots", "ls"); strings.Contains(l, id) {
			out = append(out, "snapshot")
		}
		if l, _ := ctr("leases", "ls", "-q"); strings.Contains(l, id) {
			out = append(out, "lease")
		}
		if _, err := os.Lstat(filepath.Join(opts.RunDir, id)); err == nil {
			out = append(out, "run dir")
		}
		if p := process.CgroupProcesses(oci.CgroupParent + "/" + id); len(p) > 0 {
			out = append(out, fmt.Sprintf("processes %v", p))
		}
		// Its shim (-id ID) and its watchdog (ID as an argument).
		if p := hostProcsWith("\x00" + id + "\x00"); len(p) > 0 {
			out = append(out, fmt.Sprintf("processes naming it %v", p))
		}
		return out
	}
	waitfor.NoError(t, "the idle sandbox "+id+" to go after its process died", 20*time.Second-time.Since(crashed), func() error {
		if l := left(); len(l) > 0 {
			return fmt.Errorf("%s after its process died, it has left: %s", time.Since(crashed).Round(time.Second), strings.Join(l, ", "))
		}
		return nil
	})
	t.Logf("idle sandbox gone %s after its process died", time.Since(crashed).Round(100*time.Millisecond))
	assertClean(t, name, opts, id)
}
