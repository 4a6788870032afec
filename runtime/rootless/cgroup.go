package rootless

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A user may have a cgroup v2 subtree of their own (systemd delegates one:
// `systemd-run --user --scope -p Delegate=yes skillbox …`). Then a
// rootless run's memory, pids and CPU limits are the kernel's, as root's
// are, instead of skillbox's sampling: each run gets a child cgroup with
// its limits, which runsc joins.

// cgroupRoot is where the cgroup v2 hierarchy is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// LeafName is the child cgroup skillbox moves its own processes into: a
// cgroup v2 cgroup with children may hold no process itself.
const LeafName = "skillbox"

// Cgroup is a delegated cgroup v2 subtree prepared for runs.
type Cgroup struct {
	// Path is the subtree, relative to the hierarchy's root ("/user.slice/…");
	// a run's cgroup is Path/<run id>.
	Path string
	// CPU says the cpu controller is delegated too (cpu.max).
	CPU bool
}

// DelegatedCgroup prepares this process's cgroup for runs when it is a
// cgroup v2 subtree the user may manage with memory and pids delegated and
// no process but skillbox's own in it: it moves skillbox (this process
// and the one that started it in its user namespace) into a leaf and
// enables the controllers for children. Otherwise it returns why not; the
// runs are then limited without a cgroup.
func DelegatedCgroup() (*Cgroup, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	v2 := unix.Statfs(cgroupRoot, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
	return delegatedCgroup(cgroupRoot, v2, self, []int{os.Getpid(), os.Getppid()})
}

// ErrNoDelegation is DelegatedCgroup's error when there is no subtree to use.
var ErrNoDelegation = errors.New("no delegated cgroup v2 subtree")

// delegatedCgroup is DelegatedCgroup on the hierarchy at root (v2: it is
// cgroup v2), for this process's /proc/self/cgroup self and skillbox's
// pids ours.
func delegatedCgroup(root string, v2 bool, self []byte, ours []int) (*Cgroup, error) {
	if !v2 {
		return nil, fmt.Errorf("%w: %s is not a cgroup v2 hierarchy", ErrNoDelegation, root)
	}
	rel := ""
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			rel = p
		}
	}
	if !strings.HasPrefix(rel, "/") {
		return nil, fmt.Errorf("%w: this process is in no cgroup v2 cgroup", ErrNoDelegation)
	}
	rel = filepath.Clean(rel)
	if filepath.Base(rel) == LeafName {
		rel = filepath.Dir(rel) // a skillbox of ours prepared it already
	}
	dir := filepath.Join(root, rel)
	var ds unix.Stat_t
	if err := unix.Stat(dir, &ds); err != nil || int(ds.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%w: %s is not this user's", ErrNoDelegation, dir)
	}
	for _, f := range []string{"cgroup.procs", "cgroup.subtree_control"} {
		if unix.Access(filepath.Join(dir, f), unix.W_OK) != nil {
			return nil, fmt.Errorf("%w: %s/%s is not writable", ErrNoDelegation, dir, f)
		}
	}
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDelegation, err)
	}
	have := map[string]bool{}
	for _, c := range strings.Fields(string(ctrl)) {
		have[c] = true
	}
	if !have["memory"] || !have["pids"] {
		return nil, fmt.Errorf("%w: %s has the controllers %q, not memory and pids", ErrNoDelegation, dir, strings.TrimSpace(string(ctrl)))
	}
	// Only skillbox may be in it: the others would have to move too.
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDelegation, err)
	}
	isOurs := map[int]bool{}
	for _, p := range ours {
		isOurs[p] = true
	}
	for _, f := range strings.Fields(string(procs)) {
		if pid, _ := strconv.Atoi(f); !isOurs[pid] {
			return nil, fmt.Errorf("%w: %s holds other processes (pid %s); start skillbox in a cgroup of its own: systemd-run --user --scope -p Delegate=yes skillbox …", ErrNoDelegation, dir, f)
		}
	}
	leaf := filepath.Join(dir, LeafName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%w: make %s: %v", ErrNoDelegation, leaf, err)
	}
	for _, f := range strings.Fields(string(procs)) {
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(f), 0o644); err != nil {
			return nil, fmt.Errorf("%w: move pid %s into %s: %v", ErrNoDelegation, f, leaf, err)
		}
	}
	enable := "+memory +pids"
	if have["cpu"] {
		enable += " +cpu"
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(enable), 0o644); err != nil {
		return nil, fmt.Errorf("%w: enable %s in %s: %v", ErrNoDelegation, enable, dir, err)
	}
	return &Cgroup{Path: rel, CPU: have["cpu"]}, nil
}
