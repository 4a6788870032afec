package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestJobConfinementValidate(t *testing.T) {
	const self = 0
	for _, tc := range []struct {
		name string
		c    JobConfinement
		want string // "" valid, else a part of the error
	}{
		{"nobody", JobConfinement{UID: 65534, GID: 65534, NetNS: true, WorkDir: "/work"}, ""},
		{"no work dir", JobConfinement{UID: 1000, GID: 1000}, ""},
		{"root uid", JobConfinement{UID: 0, GID: 65534}, "uid 0"},
		{"root gid", JobConfinement{UID: 65534, GID: 0}, "gid 0"},
		{"negative", JobConfinement{UID: -1, GID: 65534}, "uid -1"},
		{"overflow uid", JobConfinement{UID: 1 << 31, GID: 65534}, "must be a uid"},
		{"supervisor's uid", JobConfinement{UID: 1000, GID: 65534}, "supervisor's own"},
		{"supervisor's gid", JobConfinement{UID: 65534, GID: 1001}, "supervisor's own group"},
		{"relative work dir", JobConfinement{UID: 65534, GID: 65534, WorkDir: "work"}, "clean absolute"},
		{"unclean work dir", JobConfinement{UID: 65534, GID: 65534, WorkDir: "/work/../etc"}, "clean absolute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			selfUID, selfGID := self, self
			if strings.HasPrefix(tc.name, "supervisor's") {
				selfUID, selfGID = 1000, 1001
			}
			err := tc.c.Validate(selfUID, selfGID)
			if tc.want == "" && err != nil {
				t.Fatalf("err %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err %v, want one with %q", err, tc.want)
			}
		})
	}
}

// TestJobConfinementSysProcAttr pins how a confined process starts: its
// own user namespace mapping only its ids, its own network namespace only
// when asked, no supplementary group, its own session.
func TestJobConfinementSysProcAttr(t *testing.T) {
	for _, netns := range []bool{false, true} {
		c := &JobConfinement{UID: 65534, GID: 65533, NetNS: netns}
		a := c.sysProcAttr()
		want := uintptr(syscall.CLONE_NEWUSER)
		if netns {
			want |= syscall.CLONE_NEWNET
		}
		if a.Cloneflags != want || !a.Setsid || !a.GidMappingsEnableSetgroups {
			t.Errorf("netns %v: %+v", netns, a)
		}
		if len(a.UidMappings) != 1 || a.UidMappings[0] != (syscall.SysProcIDMap{ContainerID: 65534, HostID: 65534, Size: 1}) ||
			len(a.GidMappings) != 1 || a.GidMappings[0] != (syscall.SysProcIDMap{ContainerID: 65533, HostID: 65533, Size: 1}) {
			t.Errorf("maps %+v %+v", a.UidMappings, a.GidMappings)
		}
		cr := a.Credential
		if cr == nil || cr.Uid != 65534 || cr.Gid != 65533 || cr.Groups == nil || len(cr.Groups) != 0 || cr.NoSetGroups {
			t.Errorf("credential %+v", cr)
		}
	}
	s := &server{}
	if a := s.sysProcAttr(); a.Cloneflags != 0 || a.Credential != nil || !a.Setsid {
		t.Errorf("unconfined %+v", a)
	}
}

// TestOpenLogConfined: a background log in the job's tree is opened
// without following a link at any step, never as a file that is not the
// job's or has a second name, never blocking on a FIFO; what it makes is
// the job's.
func TestOpenLogConfined(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 65534, 65534
	}
	c := &JobConfinement{UID: uid, GID: gid}
	root := t.TempDir()
	runs := filepath.Join(root, "runs")
	owner := func(p string) (int, int) {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return int(st.Uid), int(st.Gid)
	}

	t.Run("made", func(t *testing.T) {
		log := filepath.Join(runs, "a", "out.log")
		f, err := c.openLog(log)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("one\n")
		f.Close()
		for _, p := range []string{runs, filepath.Dir(log), log} {
			if u, g := owner(p); u != uid || g != gid {
				t.Errorf("%s: owner %d:%d, want the job's %d:%d", p, u, g, uid, gid)
			}
		}
		if fi, _ := os.Stat(log); fi.Mode().Perm() != 0o600 {
			t.Errorf("log mode %v", fi.Mode())
		}
		// Appended to, the second time.
		f, err = c.openLog(log)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("two\n")
		f.Close()
		if b, _ := os.ReadFile(log); string(b) != "one\ntwo\n" {
			t.Errorf("log %q", b)
		}
	})

	secret := filepath.Join(root, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for _, tc := range []struct {
		name  string
		setup func(dir string) string // returns the log path
	}{
		{"linked dir", func(dir string) string {
			mustDo(t, os.Symlink(outside, filepath.Join(dir, "d")))
			return filepath.Join(dir, "d", "x.log")
		}},
		{"linked log", func(dir string) string {
			mustDo(t, os.Symlink(secret, filepath.Join(dir, "x.log")))
			return filepath.Join(dir, "x.log")
		}},
		{"hard link", func(dir string) string {
			mustDo(t, os.Link(secret, filepath.Join(dir, "x.log")))
			return filepath.Join(dir, "x.log")
		}},
		{"fifo", func(dir string) string {
			mustDo(t, syscall.Mkfifo(filepath.Join(dir, "x.log"), 0o600))
			return filepath.Join(dir, "x.log")
		}},
		{"not the job's", func(dir string) string {
			p := filepath.Join(dir, "x.log")
			mustDo(t, os.WriteFile(p, nil, 0o600))
			if os.Getuid() == 0 {
				return p // root's, and the job is 65534
			}
			t.Skip("needs root: every file an ordinary user makes is the job's here")
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(root, strings.ReplaceAll(tc.name, " ", "-"))
			mustDo(t, os.Mkdir(dir, 0o700))
			log := tc.setup(dir)
			done := make(chan error, 1)
			go func() {
				f, err := c.openLog(log)
				if f != nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("opened %s", log)
				}
				t.Log(err)
			case <-time.After(5 * time.Second):
				t.Fatal("openLog blocked")
			}
			if b, _ := os.ReadFile(secret); string(b) != "s" {
				t.Errorf("secret is now %q", b)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("made %v outside", ents)
			}
		})
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
