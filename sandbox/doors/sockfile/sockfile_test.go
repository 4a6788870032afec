package sockfile

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// otherUID owns what "another user" plants in these tests (nobody).
const otherUID = 65534

// TestListenLockNoFollow: in a sticky world-writable socket directory,
// another user may plant something at the lock path. Listen must refuse a
// link, a non-regular file, a file of another uid or one with more links,
// and create nothing at a link's target. As root the planted files belong
// to a real other uid; without root, to us (the same refusal for links and
// special files).
func TestListenLockNoFollow(t *testing.T) {
	root := os.Geteuid() == 0
	plant := func(t *testing.T, p string) {
		t.Helper()
		if root {
			if err := os.Lchown(p, otherUID, otherUID); err != nil {
				t.Fatal(err)
			}
		}
	}
	sticky := func(t *testing.T) string {
		t.Helper()
		d := filepath.Join(t.TempDir(), "s") // short: socket paths are capped
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		return d
	}
	cases := []struct {
		name     string
		rootOnly bool
		setup    func(t *testing.T, lock, target string)
		want     string
	}{
		{"symlink to a new file", false, func(t *testing.T, lock, target string) {
			if err := os.Symlink(target, lock); err != nil {
				t.Fatal(err)
			}
			plant(t, lock)
		}, "symbolic link"},
		{"fifo", false, func(t *testing.T, lock, target string) {
			if err := syscall.Mkfifo(lock, 0o666); err != nil {
				t.Fatal(err)
			}
			plant(t, lock)
		}, "not a regular file"},
		{"another uid's file", true, func(t *testing.T, lock, target string) {
			if err := os.WriteFile(lock, nil, 0o666); err != nil {
				t.Fatal(err)
			}
			plant(t, lock)
		}, "belongs to uid 65534"},
		{"hard link", false, func(t *testing.T, lock, target string) {
			if err := os.WriteFile(target, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(target, lock); err != nil {
				t.Fatal(err)
			}
		}, "hard links"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rootOnly && !root {
				t.Skip("needs root to give a file to another uid")
			}
			dir := sticky(t)
			elsewhere := t.TempDir()
			target := filepath.Join(elsewhere, "chosen-by-another-user")
			sock := filepath.Join(dir, "s.sock")
			tc.setup(t, sock+".lock", target)
			before, beforeErr := os.Lstat(target)

			ln, err := Listen(sock, 0o666, "")
			if err == nil {
				ln.Close()
				t.Fatal("Listen followed or accepted the planted lock path")
			}
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "remove it") {
				t.Errorf("error %v: want ErrUnsafe saying %q and what to do", err, tc.want)
			}
			after, afterErr := os.Lstat(target)
			switch {
			case beforeErr != nil && afterErr == nil:
				t.Errorf("Listen created %s at the link's target", target)
			case beforeErr == nil && (afterErr != nil || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime())):
				t.Errorf("Listen touched %s", target)
			}
			if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a socket was created despite the refusal: %v", err)
			}
		})
	}
	t.Run("a lock of our own is reused", func(t *testing.T) {
		dir := sticky(t)
		sock := filepath.Join(dir, "s.sock")
		if err := os.WriteFile(sock+".lock", nil, 0o600); err != nil {
			t.Fatal(err)
		}
		ln, err := Listen(sock, 0o666, "")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	})
}

func TestListenSocketFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	path := filepath.Join(dir, "s.sock")
	ln, err := Listen(path, 0o660, strconv.Itoa(os.Getgid()))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v, want socket 0660", fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Gid != uint32(os.Getgid()) {
		t.Fatalf("socket gid %d", st.Gid)
	}
	di, _ := os.Stat(dir)
	if di.Mode().Perm() != 0o750 {
		t.Fatalf("created socket dir mode %v, want 0750", di.Mode().Perm())
	}
	if ln.Addr().String() != path {
		t.Fatalf("Addr %s, want %s", ln.Addr(), path)
	}
	// No temporary bind directory is left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".sb") {
			t.Fatalf("leftover %s", e.Name())
		}
	}

	// A second daemon on the same path is refused while the first lives.
	if _, err := Listen(path, 0o660, ""); err == nil || !strings.Contains(err.Error(), "another skillbox is serving on") {
		t.Fatalf("second Listen: %v", err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket not removed on Close: %v", err)
	}
	// And after Close, the path is free again.
	ln2, err := Listen(path, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	ln2.Close()

	// World-writable directory without sticky bit: refused.
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := Listen(filepath.Join(open, "s.sock"), 0o660, ""); err == nil {
		t.Fatal("Listen in a world-writable directory succeeded")
	}
	if _, err := Listen(filepath.Join(t.TempDir(), "s.sock"), 0o660, "no-such-group-xyz"); err == nil {
		t.Fatal("Listen with an unknown group succeeded")
	}
}

func TestListenStaleAndForeignSockets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	// A stale socket: bound, then closed without unlinking.
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	old.Close()
	ln, err := Listen(path, 0o660, "")
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("new socket not reachable: %v", err)
	}
	nc.Close()
	ln.Close()

	// A live socket that some other process serves (no lock file held).
	live, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := Listen(path, 0o660, ""); err == nil || !strings.Contains(err.Error(), "another skillbox is serving on "+path) {
		t.Fatalf("live socket: %v", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("live socket was removed: %v", err)
	}

	// A regular file is never replaced.
	file := filepath.Join(dir, "file.sock")
	os.WriteFile(file, []byte("keep"), 0o600)
	if _, err := Listen(file, 0o660, ""); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatal("regular file was changed")
	}
	long := "/tmp/" + strings.Repeat("x", 120)
	if _, err := Listen(long, 0o660, ""); err == nil || !strings.Contains(err.Error(), "limited") {
		t.Fatalf("long path: %v", err)
	}
}
