package rootless

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParseIDMap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		initial bool
		hostUID int
		bad     bool
	}{
		{name: "host", in: "         0          0 4294967295\n", initial: true, hostUID: 0},
		{name: "one_user", in: "         0       1001          1\n", hostUID: 1001},
		{name: "container", in: "0 100000 65536\n", hostUID: 100000},
		{name: "two_ranges", in: "1 100000 65536\n0 1001 1\n", hostUID: 1001},
		{name: "root_unmapped", in: "1 100000 65536\n", hostUID: -1},
		{name: "garbage", in: "0 x 1\n", bad: true},
		{name: "short_line", in: "0 1\n", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := parseIDMap(strings.NewReader(tc.in))
			if tc.bad {
				if err == nil {
					t.Fatalf("want an error for %q", tc.in)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.initial() != tc.initial {
				t.Errorf("initial = %v, want %v", m.initial(), tc.initial)
			}
			if uid := m.outside(0); uid != tc.hostUID {
				t.Errorf("uid 0 is host uid %d, want %d", uid, tc.hostUID)
			}
		})
	}
}

// A kernel that refuses user namespaces says EPERM, ENOSPC, ...; the error
// names what to check.
func TestStartErrorSaysWhatToDo(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EPERM, syscall.ENOSPC, syscall.EACCES, syscall.EINVAL} {
		err := startError(&wrapped{errno})
		if !errors.Is(err, ErrNoUserNamespaces) || !errors.Is(err, errno) {
			t.Errorf("%v: %v", errno, err)
		}
		for _, want := range []string{"user.max_user_namespaces", "apparmor_restrict_unprivileged_userns", "as root"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v: message lacks %q: %v", errno, want, err)
			}
		}
	}
	if err := startError(syscall.ENOENT); errors.Is(err, ErrNoUserNamespaces) {
		t.Errorf("a missing binary is not a user namespace problem: %v", err)
	}
}

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "fork/exec /proc/self/exe: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func TestUserDirs(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("XDG_STATE_HOME", "/state")
	d, err := UserDirs()
	if err != nil || d.Base != "/state/skillbox" || d.Runs() != "/state/skillbox/runs" {
		t.Errorf("XDG_STATE_HOME: %+v %v", d, err)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if d, err = UserDirs(); err != nil || d.Base != "/home/u/.local/state/skillbox" {
		t.Errorf("HOME: %+v %v", d, err)
	}
	// A runtime dir of the user's is preferred; one that is not a
	// directory is not used.
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	if d, _ = UserDirs(); d.Base != dir+"/skillbox" {
		t.Errorf("runtime dir: %+v", d)
	}
	t.Setenv("XDG_RUNTIME_DIR", "/dev/null")
	if d, _ = UserDirs(); d.Base != "/home/u/.local/state/skillbox" {
		t.Errorf("runtime dir not a directory: %+v", d)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("HOME", "")
	if _, err = UserDirs(); err == nil {
		t.Error("no HOME: want an error")
	}
}

// A fake cgroup v2 hierarchy: which subtrees count as delegated, and what
// preparing one writes.
func TestDelegatedCgroup(t *testing.T) {
	const own = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope"
	write := func(t *testing.T, root, rel, name, data string) {
		t.Helper()
		dir := filepath.Join(root, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		v2       bool
		self     string
		ctrl     string
		procs    string
		wantErr  string
		wantCPU  bool
		wantPath string
	}{
		{name: "v1_or_hybrid", v2: false, self: "0::" + own, ctrl: "memory pids", procs: "10\n", wantErr: "not a cgroup v2"},
		{name: "no_v2_line", v2: true, self: "4:memory:/x\n", ctrl: "memory pids", procs: "10\n", wantErr: "no cgroup v2 cgroup"},
		{name: "no_memory", v2: true, self: "0::" + own, ctrl: "pids cpu", procs: "10\n", wantErr: "not memory and pids"},
		{name: "others_inside", v2: true, self: "0::" + own, ctrl: "memory pids", procs: "10\n77\n", wantErr: "systemd-run --user --scope"},
		{name: "delegated", v2: true, self: "0::" + own, ctrl: "cpu memory pids", procs: "10\n11\n", wantCPU: true, wantPath: own},
		{name: "delegated_without_cpu", v2: true, self: "0::" + own, ctrl: "memory pids", procs: "10\n", wantPath: own},
		{name: "already_in_leaf", v2: true, self: "0::" + own + "/" + LeafName, ctrl: "memory pids", procs: "", wantPath: own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, own, "cgroup.controllers", tc.ctrl)
			write(t, root, own, "cgroup.procs", tc.procs)
			write(t, root, own, "cgroup.subtree_control", "")
			cg, err := delegatedCgroup(root, tc.v2, []byte(tc.self), []int{10, 11})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrNoDelegation) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want ErrNoDelegation with %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cg.Path != tc.wantPath || cg.CPU != tc.wantCPU {
				t.Errorf("got %+v, want path %s cpu %v", cg, tc.wantPath, tc.wantCPU)
			}
			sub, _ := os.ReadFile(filepath.Join(root, own, "cgroup.subtree_control"))
			if !strings.Contains(string(sub), "+memory +pids") || strings.Contains(string(sub), "+cpu") != tc.wantCPU {
				t.Errorf("subtree_control = %q", sub)
			}
			if fi, err := os.Stat(filepath.Join(root, own, LeafName)); err != nil || !fi.IsDir() {
				t.Errorf("no leaf for skillbox's own processes: %v", err)
			}
		})
	}
}
