//go:build integration

package kubernetes

import (
	"archive/tar"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sync/atomic"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// kubeNotApplicable are the cases of the run table whose check cannot
// hold for a pod, with why. Every other case runs, with the kubernetes
// meaning of its check where it differs (CaseEnv): gVisor's kernel, no
// per-run pids limit.
var kubeNotApplicable = map[string]string{}

// agentDiffers are the cases whose check does not hold as written under
// the pod's agent, each with what holds instead and where it is tested.
// They are differences of the agent data path still open, not passes.
var agentDiffers = map[string]string{
	"host_env_invisible": "pid 1 is the agent, not the job's first process: the job's read of /proc/1/environ is refused (EACCES), which the case's script takes for a failure; the job cannot read the agent's environ, mem or fd (supervisor's confinement tests), and the agent's environment holds no secret",
	"memory_hog":         "warm, the agent shares the pod's memory limit with the job and did not answer the stop in time: the run ended at its timeout with its pod deleted, not as oom (cold it ends as oom)",
	"no_capabilities":    "the job has no capabilities (CapPrm, CapEff and CapAmb 0, NoNewPrivs 1), but its bounding set is its user namespace's full set: Go's process start cannot drop it before exec; dropping it needs a start helper in the pod",
}

// kubeColdCases are the cases also run cold (a pod made for the job): the
// warm run covers every case through the same lifecycle steps, and a cold
// pod costs seconds each. SKILLBOX_TEST_KUBE_COLD=all runs every case cold.
var kubeColdCases = map[string]bool{
	"hello_python_args_exit": true, "hello_node_args_exit": true, "stdin_and_env": true, "kernel_seen_by_script": true,
	"timeout_term_delivered": true, "output_over_cap_then_exit": true, "inputs_and_outputs": true, "fork_bomb_then_memory": true,
	"host_files_invisible": true, "cap_" + runtime.CapOutputFiles: true, "memory_hog": true,
}

// kubeMeanings are the cases whose check means something of its own on
// a pod, said in the test's log.
var kubeMeanings = map[string]string{
	"fork_bomb_*":           "a PodSpec has no per-run pids limit (CaseEnv.PidsUnenforced): the bomb must end at the memory limit, the timeout or by itself, with pids enforced by none, and no pod left",
	"host_files_invisible":  "the skill's link to the host secret travels in the skill layer as its target text, which in the pod names a path of the pod's own /tmp",
	"timeout_evasion":       "the processes left on the host are looked for on this host, the test cluster's single node",
	"kernel_seen_by_script": "the script must see gVisor's kernel, not the host's: the pod runs under the RuntimeClass gvisor",
}

// TestTable runs the run table every backend runs (runtimetest.Cases)
// on the kubernetes backend against the test cluster, cold (Run, the
// lifecycle at once) and warm (boot, then deliver, as the pool does): the
// test rootfs (hack/test-rootfs.sh) is a one-layer image imported into the
// node by digest, and each case's skill reaches the node as the derived
// image the backend builds and pushes to a registry the test serves, as
// in TestArtifacts. The cases' scripts talk to gVisor's kernel (the
// kernel case checks it inside the pod); no pod of skillbox's may be left
// after a case.
func TestTable(t *testing.T) {
	for _, path := range []string{DataPathAgent, DataPathExec} {
		t.Run(path, func(t *testing.T) { testTable(t, path) })
	}
}

// testTable runs the table with data path path: with DataPathAgent the
// runs it can carry go through the pods' agents (the test rootfs's agent
// image imported too), the others through pods/exec as with DataPathExec.
func testTable(t *testing.T, path string) {
	rootfs := testRootfs(t)
	reg := newTestRegistry(t)
	c := startCluster(t)
	c.useRegistry(t, reg) // the node's containerd speaks plain HTTP to it
	addr := c.registry

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Minute)
	defer cancel()
	c.ensureNamespace(ctx, t)
	img := rootfsImage(t, rootfs)
	opts := Options{Kubeconfig: c.kubeconfig, Registry: addr + "/skillbox", DataPath: path}
	if path == DataPathAgent {
		opts.AgentBinary = skillboxBin(t)
		_, opts.EgressNetNS = testNode(ctx, t, c)
		c.importAgentImage(ctx, t, img, opts.AgentBinary)
	} else {
		c.importImage(ctx, t, img)
	}

	// KillGrace is generous, as in the runtime package's table, so that a
	// script handling TERM gets to run its handler on a loaded machine.
	k, err := New(runtime.Options{KillGrace: 5 * time.Second, Backend: opts})
	if err != nil {
		t.Fatal(err)
	}
	k.artifacts = NewArtifacts(t.TempDir())

	envVal := "ENVSECRET-" + runtimetest.RandomHex(10)
	t.Setenv(runtimetest.HostEnvName, envVal)
	notApplicable := kubeNotApplicable
	if path == DataPathAgent {
		notApplicable = maps.Clone(kubeNotApplicable)
		maps.Copy(notApplicable, agentDiffers)
	}
	for name, why := range notApplicable {
		t.Logf("case %s does not apply to pods (data path %s): %s", name, path, why)
	}
	for name, what := range kubeMeanings {
		t.Logf("case %s on kubernetes: %s", name, what)
	}
	var seq atomic.Int64
	tag := runtimetest.RandomHex(2)
	tb := runtimetest.Table{
		Runtime: k,
		Env: runtimetest.CaseEnv{Backend: Name, Kernel: runtimetest.KernelGVisor, Secret: runtimetest.NewHostSecret(t), EnvVal: envVal,
			PidsUnenforced: true},
		Image:         img,
		NewID:         func() string { return fmt.Sprintf("kube-table-%s-%s-%d", path, tag, seq.Add(1)) },
		NotApplicable: notApplicable,
		After:         func(t *testing.T, job runtime.Job) { noPodsLeft(ctx, t, c, job.Sandbox.ID) },
	}
	tb.Run(t, runtimetest.Warm)
	t.Run(string(runtimetest.Cold), func(t *testing.T) {
		all := os.Getenv("SKILLBOX_TEST_KUBE_COLD") == "all"
		n := 0
		for _, tc := range runtimetest.Cases() {
			if !all && !kubeColdCases[tc.Name] {
				continue
			}
			n++
			t.Run(tc.Name, func(t *testing.T) { tb.RunCase(t, runtimetest.Cold, tc) })
		}
		t.Logf("cold: %d of %d cases (warm: all; SKILLBOX_TEST_KUBE_COLD=all runs every case cold)", n, len(runtimetest.Cases()))
	})
}

// testRootfs is the rootfs of the runtime package's integration tests:
// $SKILLBOX_TEST_ROOTFS, or the one hack/test-rootfs.sh keeps (and
// builds once) at /var/cache/skillbox/test-rootfs.
func testRootfs(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SKILLBOX_TEST_ROOTFS"); p != "" {
		return p
	}
	if os.Geteuid() != 0 {
		runtimetest.SkipUnlessRequired(t, "building the test rootfs needs root")
	}
	const cache = "/var/cache/skillbox/test-rootfs"
	script, err := filepath.Abs(filepath.Join("..", "..", "hack", "test-rootfs.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(script, cache).CombinedOutput(); err != nil {
		t.Fatalf("building the test rootfs with %s failed: %v\n%s", script, err, out)
	}
	return cache
}

// rootfsImage is the rootfs dir as a one-layer image (of an OCI layout of
// its own, written by the artifacts' layer writer), named test-rootfs.
func rootfsImage(t *testing.T, rootfs string) runtime.ImageRef {
	t.Helper()
	start := time.Now()
	a := NewArtifacts(filepath.Join(t.TempDir(), "layout"))
	if err := os.MkdirAll(filepath.Join(a.Dir(), "blobs", "sha256"), 0o700); err != nil {
		t.Fatal(err)
	}
	layer, err := a.writeLayer(func(lw *layerWriter) error { return rootfsLayer(lw, rootfs) })
	if err != nil {
		t.Fatalf("the test rootfs %s as a layer: %v", rootfs, err)
	}
	cfg := ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: goruntime.GOARCH},
		Config:   ocispec.ImageConfig{Env: []string{"PATH=" + runtime.DefaultPath}},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.Digest}},
	}
	cfgDesc, err := a.writeJSON(ocispec.MediaTypeImageConfig, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cfgDesc, Layers: []ocispec.Descriptor{layer}}
	md, err := a.writeJSON(m.MediaType, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("test rootfs %s as image %s (layer of %d MiB) in %s", rootfs, md.Digest, layer.Size>>20, time.Since(start).Round(time.Second))
	return runtime.ImageRef{Name: "test-rootfs", Digest: md.Digest.String(), Layout: a.Dir()}
}

// rootfsLayer writes the top of rootfs entry by entry and each directory
// as a tree, but /dev as an empty directory: the runtime mounts a /dev of
// its own there, and the device nodes of the rootfs cannot be entries of a
// layer (tree refuses them).
func rootfsLayer(lw *layerWriter, rootfs string) error {
	entries, err := os.ReadDir(rootfs)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(rootfs, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case e.Name() == "dev":
			err = lw.dir(e.Name(), 0o755)
		case fi.IsDir():
			err = lw.tree(p, e.Name())
		case fi.Mode()&os.ModeSymlink != 0:
			var target string
			if target, err = os.Readlink(p); err == nil {
				err = lw.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: e.Name(), Linkname: target, Mode: 0o777})
			}
		case fi.Mode().IsRegular():
			err = lw.regular(p, e.Name(), int64(fi.Mode().Perm()))
		default:
			err = fmt.Errorf("%s is a %s: not part of the test image", p, fi.Mode().Type())
		}
		if err != nil {
			return err
		}
	}
	return nil
}
