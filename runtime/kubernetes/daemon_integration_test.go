//go:build integration

package kubernetes

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// TestDaemonStartSweeps starts the real daemon (SKILLBOX_BIN serve) on the
// kubernetes runtime with a pod of its instance left by a dead process (as
// a daemon killed with -9 leaves its runs' pods, TestSweepAfterKill): the
// daemon's start sweeps it, and spares the pod of another instance.
func TestDaemonStartSweeps(t *testing.T) {
	bin := skillboxBin(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c.ensureNamespace(ctx, t)

	d := newKubeDaemon(t, bin, c, "")
	pods := c.cs.CoreV1().Pods(DefaultNamespace)
	// No pid reaches pid_max (at most 2^22): the owner is dead.
	dead := fmt.Sprintf("%d-1", 1<<22)
	createLabelledPods(ctx, t, pods, map[string]map[string]string{
		"daemon-leftover":       {LabelManagedBy: ManagedBy, LabelInstance: d.instance, LabelOwner: dead},
		"daemon-other-instance": {LabelManagedBy: ManagedBy, LabelInstance: strings.Repeat("1", 32), LabelOwner: dead},
	})

	d.start()
	defer d.stop()
	for {
		_, err := pods.Get(ctx, "daemon-leftover", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		d.running(ctx, "the leftover pod is still there after the daemon's start")
	}
	d.waitSocket()
	if _, err := pods.Get(ctx, "daemon-other-instance", metav1.GetOptions{}); err != nil {
		t.Errorf("the pod of another instance: %v (the daemon swept it)", err)
	}
}

// TestDaemonKilledMidRun runs a long skill script through the real daemon
// (SKILLBOX_BIN serve, over its socket) on the kubernetes runtime, kills
// the daemon with -9 while the script runs in its pod, and restarts it on
// the same state dirs: the pod outlives the daemon, and the restarted
// daemon's start sweep removes it, sparing the pods of another instance
// and of a live process of this one. The audit log keeps the run's start,
// has no end for it, and verifies.
func TestDaemonKilledMidRun(t *testing.T) {
	bin := skillboxBin(t)
	img := pythonImage(t)
	reg := newTestRegistry(t)
	c := startCluster(t)
	// The skill's files reach the node as a derived image.
	c.useRegistry(t, reg)
	// An import alone takes minutes on a busy machine.
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	c.ensureNamespace(ctx, t)
	c.importImage(ctx, t, img)

	roots := writeTree(t, t.TempDir(), map[string]string{
		"sleeper/SKILL.md":         "---\nname: sleeper\ndescription: Sleeps, for the kubernetes daemon tests.\n---\n# sleeper\n\nRun scripts/sleep.py.\n",
		"sleeper/scripts/sleep.py": "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n",
	})
	d := newKubeDaemon(t, bin, c, fmt.Sprintf(`
skills { roots = [%q] }
images { dir = %q }
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script"]
}
`, roots, imagesDir()))
	d.registry = c.registry + "/skillbox"
	d.writeConfig()

	pods := c.cs.CoreV1().Pods(DefaultNamespace)
	self, err := processOwner(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	spared := map[string]map[string]string{
		"killed-daemon-live-owner":     {LabelManagedBy: ManagedBy, LabelInstance: d.instance, LabelOwner: self},
		"killed-daemon-other-instance": {LabelManagedBy: ManagedBy, LabelInstance: strings.Repeat("2", 32), LabelOwner: self},
	}
	createLabelledPods(ctx, t, pods, spared)

	d.start()
	d.waitSocket()
	owner, err := processOwner(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.Dial(ctx, d.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sid, err := cl.NewSession(ctx)
	if err != nil {
		t.Fatalf("sessions.create: %v", err)
	}
	if _, err := cl.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"sleeper"}}); err != nil {
		t.Fatalf("skills.load: %v", err)
	}
	runErr := make(chan error, 1)
	go func() {
		res, err := cl.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, TimeoutMS: 300_000}, Path: "scripts/sleep.py"})
		if err == nil {
			err = fmt.Errorf("the run ended: %+v", res)
		}
		runErr <- err
	}()

	// The run's pod: of the daemon's instance and process, running, its
	// deadline set (the script is being executed).
	var name string
	for name == "" {
		select {
		case err := <-runErr:
			t.Fatalf("the run ended before its pod ran: %v", err)
		default:
		}
		d.running(ctx, "the run's pod did not run")
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: LabelInstance + "=" + d.instance + "," + LabelOwner + "=" + owner})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.ActiveDeadlineSeconds != nil {
				name = p.Name
			}
		}
	}
	runID := d.runStarted(t)
	time.Sleep(2 * time.Second) // the exec starts after the deadline is set
	d.kill9()
	if err := <-runErr; err == nil {
		t.Error("the client's run succeeded although the daemon was killed")
	} else {
		t.Logf("the client's run after the kill: %v", err)
	}
	if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the killed daemon's pod %s is gone before the restart (%v): the test proves nothing", name, err)
	}

	restart := time.Now()
	d.start()
	defer d.stop()
	for {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		d.running(ctx, fmt.Sprintf("the killed daemon's pod %s is still there after the restart", name))
	}
	t.Logf("the killed daemon's pod %s swept %s after the restart", name, time.Since(restart).Round(10*time.Millisecond))
	d.waitSocket()
	left := skillboxPodNames(ctx, t, c)
	if want := []string{"killed-daemon-live-owner", "killed-daemon-other-instance"}; !slices.Equal(left, want) {
		t.Errorf("pods after the restart: %v, want %v (the killed daemon's %s gone, the others spared)", left, want, name)
	}
	// The restarted daemon serves: the session survived the crash.
	cl2, err := client.Dial(ctx, d.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	if ins, err := cl2.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: sid}); err != nil || !strings.Contains(ins.ActiveSkills, `name="sleeper"`) {
		t.Errorf("the session after the restart: %v %+v, want its skill sleeper", err, ins)
	}
	d.stop()

	// The log: the run's start, no end (the daemon died first), the
	// restarted daemon's start; its chain verifies.
	var started, ended bool
	starts := 0
	if err := audit.Read(d.audit, func(r *audit.Record) error {
		switch {
		case r.Event == audit.EventRunStart && r.Run != nil && r.Run.RunID == runID:
			started = true
		case r.Event == audit.EventRunEnd && r.Run != nil && r.Run.RunID == runID:
			ended = true
		case r.Event == audit.EventDaemonStart:
			starts++
		}
		return nil
	}); err != nil {
		t.Fatalf("the audit log: %v", err)
	}
	if !started || ended || starts != 2 {
		t.Errorf("audit log: run.start of %s %v (want true), run.end %v (want false), daemon.start %d times (want 2)", runID, started, ended, starts)
	}
	out, err := exec.CommandContext(ctx, bin, "audit", "verify", "--dir", d.audit).CombinedOutput()
	t.Logf("audit verify: %v\n%s", err, out)
	if err != nil {
		t.Errorf("audit verify after the kill: %v\n%s", err, out)
	}
}

// skillboxBin is SKILLBOX_BIN as an absolute path.
func skillboxBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("SKILLBOX_BIN")
	if bin == "" {
		runtimetest.SkipUnlessRequired(t, "SKILLBOX_BIN names no skillbox binary (go build -o bin/skillbox ./cmd/skillbox)")
		t.Skip("SKILLBOX_BIN not set")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func imagesDir() string {
	if dir := os.Getenv("SKILLBOX_IMAGES"); dir != "" {
		return dir
	}
	return images.DefaultDir
}

// kubeDaemon is `skillbox serve` on the kubernetes runtime against the
// test cluster, with state dirs that outlive its process (a restart keeps
// its instance) and its output in a log file.
type kubeDaemon struct {
	t        *testing.T
	bin      string
	c        *testCluster
	dir      string
	cfg      string
	socket   string
	state    string // the runtime's: the instance id
	audit    string
	log      string
	extra    string // more of the config
	registry string // the runtime's registry option
	instance string

	cmd    *exec.Cmd
	exited chan error
}

func newKubeDaemon(t *testing.T, bin string, c *testCluster, extra string) *kubeDaemon {
	t.Helper()
	dir := t.TempDir()
	d := &kubeDaemon{t: t, bin: bin, c: c, dir: dir, extra: extra,
		cfg:    filepath.Join(dir, "skillbox.hcl"),
		socket: filepath.Join(dir, "skillbox.sock"),
		state:  filepath.Join(dir, "kubernetes"),
		audit:  filepath.Join(dir, "audit"),
		log:    filepath.Join(dir, "serve.log"),
	}
	var err error
	if d.instance, err = loadInstance(d.state); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(extra, "skills {") {
		skills := filepath.Join(dir, "skills")
		if err := os.MkdirAll(skills, 0o755); err != nil {
			t.Fatal(err)
		}
		d.extra += fmt.Sprintf("skills {\n  roots = [%q]\n}\n", skills)
	}
	d.writeConfig()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(d.log)
			t.Logf("daemon log (%s):\n%s", d.log, b)
		}
	})
	t.Cleanup(d.stop) // first: a daemon that ends deletes its runs' pods
	return d
}

// writeConfig writes the daemon's config: no warm pool (the tests name the
// pods of their runs).
func (d *kubeDaemon) writeConfig() {
	d.t.Helper()
	registry := ""
	if d.registry != "" {
		registry = fmt.Sprintf("  registry   = %q\n", d.registry)
	}
	if err := os.WriteFile(d.cfg, fmt.Appendf(nil, `daemon {
  runtime   = "kubernetes"
  socket    = %q
  state_dir = %q
  audit_dir = %q
}
runtime "kubernetes" {
  kubeconfig = %q
  state_dir  = %q
%s}
pool {
  per_key = 0
}
%s`, d.socket, filepath.Join(d.dir, "state"), d.audit, d.c.kubeconfig, d.state, registry, d.extra), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// start starts the daemon; waitSocket waits until it serves.
func (d *kubeDaemon) start() {
	d.t.Helper()
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(d.bin, "serve", "--config", d.cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.cmd, d.exited = cmd, make(chan error, 1)
	go func() { d.exited <- cmd.Wait() }()
}

// running fails the test if the daemon ended or ctx did (saying what was
// awaited), and else waits a moment.
func (d *kubeDaemon) running(ctx context.Context, what string) {
	d.t.Helper()
	select {
	case err := <-d.exited:
		d.exited <- err
		d.t.Fatalf("the daemon ended: %v", err)
	case <-ctx.Done():
		d.t.Fatalf("%s: %v", what, ctx.Err())
	case <-time.After(500 * time.Millisecond):
	}
}

// waitSocket waits until the daemon accepts connections (the socket file
// of a daemon killed with -9 stays, and refuses them).
func (d *kubeDaemon) waitSocket() {
	d.t.Helper()
	for start := time.Now(); ; {
		conn, err := net.Dial("unix", d.socket)
		if err == nil {
			conn.Close()
			return
		}
		if time.Since(start) > time.Minute {
			d.t.Fatalf("the daemon serves no socket a minute after its sweep: %v", err)
		}
		select {
		case err := <-d.exited:
			d.exited <- err
			d.t.Fatalf("the daemon ended: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runStarted is the id of the run the audit log says started.
func (d *kubeDaemon) runStarted(t *testing.T) string {
	t.Helper()
	var id string
	if err := audit.Read(d.audit, func(r *audit.Record) error {
		if r.Event == audit.EventRunStart && r.Run != nil {
			id = r.Run.RunID
		}
		return nil
	}); err != nil || id == "" {
		t.Fatalf("no run.start in the audit log while the run's pod runs: %v", err)
	}
	return id
}

// kill9 kills the daemon as a crash would.
func (d *kubeDaemon) kill9() {
	d.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		d.t.Fatal(err)
	}
	err := <-d.exited
	d.cmd = nil
	d.t.Logf("daemon killed with -9: %v", err)
}

// stop ends the daemon with SIGTERM (after 30 s, SIGKILL); once stopped,
// it does nothing.
func (d *kubeDaemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		d.t.Errorf("the daemon did not end within 30 s of SIGTERM")
	}
	d.cmd = nil
}
