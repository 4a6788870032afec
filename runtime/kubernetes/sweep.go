package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// The crash sweep. A daemon killed with -9 leaves its runs' pods on the
// cluster (each ends at its deadline, but stays until deleted), and the
// next start must remove them without touching anyone else's: another
// daemon's sharing the namespace, or a `skillbox run` of this host still
// running. So every pod the backend makes carries two labels:
//
//   - LabelInstance, the id of this instance: a random id kept in the
//     backend's state dir (made on first use), so a restarted daemon on
//     the same state dir is the same instance, and two daemons with their
//     own state dirs never are, whatever their hosts and configs;
//   - LabelOwner, the process that made it: its pid and its start time
//     (from /proc), which no later process with the same pid shares.
//
// Sweep deletes the pods of this instance whose owner is not a live
// process of this host, and waits until they are gone. The state dir is
// local to one host (one replica's own), so a pid names a process there.
// A pod whose owner is this process, or another live one (a one-shot run
// next to the daemon), is spared however old it is.

// Labels of the owner of a run's pod.
const (
	LabelInstance = "skillbox.io/instance" // the id kept in the state dir
	LabelOwner    = "skillbox.io/owner"    // the creating process: PID-STARTTIME
)

// DefaultStateDir is where the instance id is kept unless the config
// names another dir (runtime "kubernetes" { state_dir }).
const DefaultStateDir = "/run/skillbox/kubernetes"

// instanceFile is the file in the state dir holding the instance id.
const instanceFile = "instance"

var instancePattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// ownership is this process's labels, found once.
type ownership struct {
	once     sync.Once
	instance string
	owner    string
	err      error
}

// stateDir is the configured state dir or the default.
func (k *Kubernetes) stateDir() string {
	if k.ko.StateDir != "" {
		return k.ko.StateDir
	}
	return DefaultStateDir
}

// labels finds (once) the instance id and this process's owner label.
func (k *Kubernetes) labels() (instance, owner string, err error) {
	o := &k.own
	o.once.Do(func() {
		if o.owner, o.err = processOwner(os.Getpid()); o.err != nil {
			return
		}
		o.instance, o.err = loadInstance(k.stateDir())
	})
	return o.instance, o.owner, o.err
}

// ownPod labels pod as this instance's and this process's, so that Sweep
// finds it if this process dies. Every pod the backend makes goes through
// it; a pod that could not be swept is not made.
func (k *Kubernetes) ownPod(pod *corev1.Pod) error {
	instance, owner, err := k.labels()
	if err != nil {
		return err
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[LabelInstance] = instance
	pod.Labels[LabelOwner] = owner
	return nil
}

// loadInstance reads the instance id from dir, making it (and dir) the
// first time.
func loadInstance(dir string) (string, error) {
	path := filepath.Join(dir, instanceFile)
	fix := fmt.Sprintf("the kubernetes runtime keeps its instance id there, which labels its pods so that a crash sweep finds them: make the dir writable, or set runtime %q { state_dir = \"DIR\" }", Name)
	read := func() (string, error) {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if err != nil {
			return "", errkind.Errorf(runtime.ErrUnavailable, "instance id: %w: %s", err, fix)
		}
		id := strings.TrimSpace(string(b))
		if !instancePattern.MatchString(id) {
			return "", errkind.Errorf(runtime.ErrUnavailable, "instance id file %s holds %q, not 32 lowercase hex digits: remove it (a new id is made; pods of the old one are then not swept)", path, id)
		}
		return id, nil
	}
	id, err := read()
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", errkind.Errorf(runtime.ErrUnavailable, "state dir %s: %w: %s", dir, err, fix)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, instanceFile+".*")
	if err != nil {
		return "", errkind.Errorf(runtime.ErrUnavailable, "state dir %s: %w: %s", dir, err, fix)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(hex.EncodeToString(b[:]) + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	// Link, not rename: of two processes making it at once, one id wins
	// and both read it.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", errkind.Errorf(runtime.ErrUnavailable, "state dir %s: %w: %s", dir, err, fix)
	}
	return read()
}

// processOwner is the owner label of process pid: PID-STARTTIME, its
// start time in clock ticks since boot (field 22 of /proc/PID/stat).
func processOwner(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", fmt.Errorf("start time of process %d: %w", pid, err)
	}
	start, err := statStartTime(string(b))
	if err != nil {
		return "", fmt.Errorf("start time of process %d: %w", pid, err)
	}
	return fmt.Sprintf("%d-%s", pid, start), nil
}

// statStartTime is the start time field of a /proc/PID/stat line. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses: the fields after it start after the last ')'.
func statStartTime(stat string) (string, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", errors.New("no ')' in /proc stat line")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); start time is field 22.
	if len(f) < 20 {
		return "", fmt.Errorf("/proc stat line has %d fields after the name, want at least 20", len(f))
	}
	if _, err := strconv.ParseUint(f[19], 10, 64); err != nil {
		return "", fmt.Errorf("start time %q: %w", f[19], err)
	}
	return f[19], nil
}

// ownerAlive says whether the process an owner label names still runs:
// the pid exists with the same start time. A label that names no process
// (malformed, or missing) is a dead owner.
func ownerAlive(owner string) bool {
	pid, _, ok := strings.Cut(owner, "-")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil || n <= 0 {
		return false
	}
	now, err := processOwner(n)
	return err == nil && now == owner
}

var _ runtime.Sweeper = (*Kubernetes)(nil)

// Sweep deletes (grace 0) the pods of this instance that no live process
// owns, and waits until they are gone. Pods of other instances, and of
// live processes of this one (this process's runs among them), stay.
func (k *Kubernetes) Sweep(ctx context.Context) error {
	instance, self, err := k.labels()
	if err != nil {
		return fmt.Errorf("sweep of pods: %w", err)
	}
	cs, _, err := k.connect()
	if err != nil {
		return fmt.Errorf("sweep of pods: %w", err)
	}
	pods := cs.CoreV1().Pods(k.namespace)
	sel := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy, LabelInstance: instance}).String()
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("sweep: list pods %s in namespace %s: %w", sel, k.namespace, err)
	}
	var deleted []string
	var errs []error
	for _, p := range list.Items {
		owner := p.Labels[LabelOwner]
		if owner == self || ownerAlive(owner) {
			continue
		}
		if err := k.killPod(cs, p.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		k.log.Info("swept the pod of a dead run", "pod", p.Name, "run", p.Annotations[AnnotationRunID], "owner", owner)
		deleted = append(deleted, p.Name)
	}
	if err := k.waitGone(ctx, cs, deleted); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitGone waits until the named pods are gone.
func (k *Kubernetes) waitGone(ctx context.Context, cs k8s.Interface, names []string) error {
	ctx, cancel := context.WithTimeout(ctx, goneTimeout)
	defer cancel()
	for len(names) > 0 {
		left := names[:0]
		for _, n := range names {
			if _, err := cs.CoreV1().Pods(k.namespace).Get(ctx, n, metav1.GetOptions{}); err == nil || !apierrors.IsNotFound(err) {
				left = append(left, n)
			}
		}
		names = left
		if len(names) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sweep: pods %s/%s still there %s after their deletion", k.namespace, strings.Join(names, ", "), goneTimeout)
		case <-time.After(pollInterval):
		}
	}
	return nil
}
