package jsonrpc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

// otherUID owns what "another user" plants in these tests (nobody).
const otherUID = 65534

// TestListenLockNoFollow: in a sticky
// world-writable socket directory, another user's symlink at the lock path
// made the daemon create a file where that user chose. Listen must refuse
// a link, a non-regular file, a file of another uid or one with more links,
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
			if !errors.Is(err, api.ErrDenied) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "remove it") {
				t.Errorf("error %v: want ErrDenied saying %q and what to do", err, tc.want)
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
