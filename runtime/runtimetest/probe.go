// Package runtimetest holds what the backends' and the daemon's
// integration tests share, so that every backend is held to the same
// rules: the run table (Cases, run by Table cold and warm on each
// backend), and, to check that a run's files stay private, a probe that
// runs as another real uid (a copy of the test binary itself) and reports
// everything of a run it could reach. Only tests import it.
package runtimetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ProbeEnv makes a test binary the probe (see ProbeIfAsked) instead of
// running tests.
const ProbeEnv = "SKILLBOX_TEST_RUNDIR_PROBE"

// ProbeIfAsked runs the probe and exits if ProbeEnv is set. A test package
// using RunProbe calls it first thing (from init or TestMain), so that its
// own test binary can be the probe.
func ProbeIfAsked() {
	if spec := os.Getenv(ProbeEnv); spec != "" {
		os.Exit(probeMain(spec))
	}
}

// ProbeSpec is what the probe is told: what to walk, which paths to try
// directly, what marks a path of a run (run ids, as `ps` shows them, or
// closed directories with a trailing slash), the names of the run's files
// (to try under /proc/<pid>/root, cwd and fd) and the secrets to look for.
type ProbeSpec struct {
	Walk    []string
	Paths   []string
	IDs     []string
	Names   []string
	Secrets []string
}

// ProbeHit is one thing the probe reached: Op is stat, list, read or fd;
// Secret says the secret was in what it read.
type ProbeHit struct {
	Op     string
	Path   string
	Secret bool `json:",omitempty"`
}

// maxProbeRead bounds what the probe reads of one file and in all.
const (
	maxProbeRead      = 1 << 20
	maxProbeReadTotal = 256 << 20
)

type probe struct {
	spec  ProbeSpec
	hits  []ProbeHit
	total int64
}

// probeMain runs as another uid: it reports, as JSON lines on stdout,
// every path it could stat, list or read that names a run, every path of
// spec.Paths it could stat, and every read that held a secret.
func probeMain(raw string) int {
	var p probe
	if err := json.Unmarshal([]byte(raw), &p.spec); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 2
	}
	for _, root := range p.spec.Walk {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // closed to us: that is the point
			}
			// Seen in a directory we could list: a name of a run here is
			// already too much.
			p.note("stat", path, nil)
			if d.Type().IsRegular() {
				p.read(path)
			}
			return nil
		})
	}
	for _, path := range p.spec.Paths {
		p.try(path)
	}
	p.procs()
	enc := json.NewEncoder(os.Stdout)
	for _, h := range p.hits {
		_ = enc.Encode(h)
	}
	return 0
}

// named says whether path names one of the runs.
func (p *probe) named(path string) bool {
	for _, id := range p.spec.IDs {
		if strings.Contains(path, id) {
			return true
		}
	}
	return false
}

// note records op on path if it names a run or data held a secret.
func (p *probe) note(op, path string, data []byte) {
	secret := false
	for _, s := range p.spec.Secrets {
		if len(data) > 0 && bytes.Contains(data, []byte(s)) {
			secret = true
		}
	}
	if secret || p.named(path) {
		p.hits = append(p.hits, ProbeHit{Op: op, Path: path, Secret: secret})
	}
}

// read reads path (non-blocking: FIFOs and devices are left alone).
func (p *probe) read(path string) {
	if p.total > maxProbeReadTotal {
		return
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return
	}
	data, _ := io.ReadAll(io.LimitReader(f, maxProbeRead))
	p.total += int64(len(data))
	p.note("read", path, data)
}

// try stats path and lists or reads what it is.
func (p *probe) try(path string) {
	st, err := os.Lstat(path)
	if err != nil {
		return
	}
	p.hits = append(p.hits, ProbeHit{Op: "stat", Path: path})
	if st.IsDir() {
		if _, err := os.ReadDir(path); err == nil {
			p.hits = append(p.hits, ProbeHit{Op: "list", Path: path})
		}
		return
	}
	p.read(path)
	if st.Mode().IsRegular() {
		if f, err := os.Open(path); err == nil {
			f.Close()
			p.hits = append(p.hits, ProbeHit{Op: "read", Path: path})
		}
	}
}

// procs tries the run's files through every process: its root, its cwd,
// its open descriptors and its environment.
func (p *probe) procs() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		for _, n := range p.spec.Names {
			for _, rel := range []string{"root/work/" + n, "cwd/" + n, "cwd/work/" + n, "root/" + n} {
				p.read(filepath.Join(dir, rel))
			}
		}
		if data, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
			p.note("read", filepath.Join(dir, "environ"), data)
		}
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			fp := filepath.Join(dir, "fd", fd.Name())
			if target, err := os.Readlink(fp); err == nil && p.named(target) {
				p.hits = append(p.hits, ProbeHit{Op: "fd", Path: fp + " -> " + target})
			}
			f, err := os.OpenFile(fp, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
			if err != nil {
				continue
			}
			if st, err := f.Stat(); err == nil && st.IsDir() {
				for _, n := range p.spec.Names {
					if fd2, err := unix.Openat(int(f.Fd()), n, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0); err == nil {
						g := os.NewFile(uintptr(fd2), fp+"/"+n)
						data, _ := io.ReadAll(io.LimitReader(g, maxProbeRead))
						g.Close()
						p.hits = append(p.hits, ProbeHit{Op: "fd", Path: fp + "/" + n})
						p.note("read", fp+"/"+n, data)
					}
				}
			} else if err == nil && st.Mode().IsRegular() {
				data, _ := io.ReadAll(io.LimitReader(f, maxProbeRead))
				p.note("read", fp, data)
			}
			f.Close()
		}
	}
}

// ProbeBinary is a copy of this test binary in a fresh 0755 temp dir,
// which other uids can run (the build dir is root's).
func ProbeBinary(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skillbox-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe")
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// RunProbe runs the probe in bin (a test binary whose package calls
// ProbeIfAsked) as uid, with the same gid and no other groups, and returns
// what it reached.
func RunProbe(t testing.TB, bin string, uid uint32, spec ProbeSpec) []ProbeHit {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{ProbeEnv + "=" + string(raw), "PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe as uid %d: %v: %s", uid, err, stderr.String())
	}
	var hits []ProbeHit
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var h ProbeHit
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			t.Fatalf("probe output %q: %v", sc.Text(), err)
		}
		hits = append(hits, h)
	}
	return hits
}
