package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeImage writes what runsc checkpoint writes, with contents of the
// given sizes (0: an empty file, -1: no file).
func fakeImage(t *testing.T, dir string, sizes map[string]int) {
	t.Helper()
	for name, n := range sizes {
		if n < 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Repeat("x", n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var goodImage = map[string]int{"checkpoint.img": 100, "pages.img": 4096, "pages_meta.img": 10}

// workspace makes a small /work to copy.
func workspace(t *testing.T) string {
	t.Helper()
	w := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(w, "out"), 0o755))
	must(t, os.WriteFile(filepath.Join(w, "count.log"), []byte("1\n2\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(w, "out", "r.csv"), []byte("a,b\n"), 0o600))
	must(t, os.Symlink("/etc/passwd", filepath.Join(w, "out", "link")))
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testManifest() Manifest {
	return Manifest{
		Session: "s-1", RunscVersion: "release-20260905.0+160fafc42237", Platform: "systrap", Network: "none",
		Image: "python", ImageDigest: "sha256:aa", SpecDigest: "sha256:bb",
		SkillDigests: map[string]string{"pdf": "sha256:cc"},
	}
}

// commit makes one checkpoint with goodImage and a workspace copy.
func commit(t *testing.T, s *Store) *Checkpoint {
	t.Helper()
	p, err := s.Begin()
	must(t, err)
	defer p.Abort()
	fakeImage(t, p.ImageDir(), goodImage)
	skipped, err := CopyTree(workspace(t), p.WorkDir())
	must(t, err)
	if len(skipped) > 0 {
		t.Fatalf("skipped %v", skipped)
	}
	ck, err := p.Commit(testManifest())
	must(t, err)
	return ck
}

func TestCommitLoad(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "ckpt"), 0)
	must(t, err)
	ck := commit(t, s)
	if !ValidID(ck.ID()) {
		t.Fatalf("id %q", ck.ID())
	}
	st, err := os.Stat(filepath.Join(ck.Dir(), ManifestName))
	must(t, err)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("manifest mode %v, want 0600", st.Mode())
	}
	ids, err := s.List()
	must(t, err)
	if len(ids) != 1 || ids[0] != ck.ID() {
		t.Fatalf("List = %v", ids)
	}
	got, err := s.Load(ck.ID())
	must(t, err)
	if got.Digest() != ck.Digest() || !strings.HasPrefix(got.Digest(), "sha256:") {
		t.Errorf("digest %s after Load, %s after Commit", got.Digest(), ck.Digest())
	}
	m := got.Manifest()
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path+":"+f.Type)
	}
	want := "image:dir image/checkpoint.img:file image/pages.img:file image/pages_meta.img:file work:dir work/count.log:file work/out:dir work/out/link:symlink work/out/r.csv:file"
	if strings.Join(paths, " ") != want {
		t.Errorf("files\n%s\nwant\n%s", strings.Join(paths, " "), want)
	}
	if m.TotalBytes != 100+4096+10+4+4+int64(len("/etc/passwd")) || m.Format != 1 || m.Created.IsZero() || m.Session != "s-1" {
		t.Errorf("manifest %+v", m)
	}
	if got.WorkDir() == "" || got.ImageDir() != filepath.Join(ck.Dir(), "image") {
		t.Errorf("dirs %q %q", got.WorkDir(), got.ImageDir())
	}
	u, err := s.Usage()
	must(t, err)
	raw, _ := os.ReadFile(filepath.Join(ck.Dir(), ManifestName))
	if u != m.TotalBytes+int64(len(raw)) {
		t.Errorf("Usage = %d, want %d", u, m.TotalBytes+int64(len(raw)))
	}
	if entries, _ := os.ReadDir(s.Dir()); len(entries) != 1 {
		t.Errorf("store holds %d entries, want the checkpoint only", len(entries))
	}
}

func TestLoadRefusesTampering(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(dir string) error
		want   string
	}{
		{"changed file", func(d string) error { return os.WriteFile(filepath.Join(d, "work/count.log"), []byte("1\n9\n"), 0o644) },
			"work/count.log changed"},
		{"grown image", func(d string) error {
			f, err := os.OpenFile(filepath.Join(d, "image/pages.img"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString("more")
			return err
		}, "image/pages.img changed (4100 bytes"},
		{"missing file", func(d string) error { return os.Remove(filepath.Join(d, "work/out/r.csv")) }, "work/out/r.csv is missing"},
		{"added file", func(d string) error { return os.WriteFile(filepath.Join(d, "work/evil.py"), nil, 0o644) }, "work/evil.py was added"},
		{"mode", func(d string) error { return os.Chmod(filepath.Join(d, "work/count.log"), 0o666) }, "work/count.log changed mode to 0666"},
		{"link retargeted", func(d string) error {
			p := filepath.Join(d, "work/out/link")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink("/etc/shadow", p)
		}, "work/out/link changed"},
		{"file became link", func(d string) error {
			p := filepath.Join(d, "work/count.log")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink("/etc/hostname", p)
		}, "work/count.log became a symlink"},
		{"manifest edited", func(d string) error {
			p := filepath.Join(d, ManifestName)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, []byte(strings.Replace(string(b), `"total_bytes"`, `"total_bytes": 1, "x"`, 1)), 0o600)
		}, "decode manifest"},
		{"no manifest", func(d string) error { return os.Remove(filepath.Join(d, ManifestName)) }, "has no readable manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "ckpt"), 0)
			must(t, err)
			ck := commit(t, s)
			must(t, tc.tamper(ck.Dir()))
			_, err = s.Load(ck.ID())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load = %v, want ErrCorrupt with %q", err, tc.want)
			}
		})
	}
}

func TestCommitRefusesFailedImage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes map[string]int
		want  string
	}{
		{"all empty", map[string]int{"checkpoint.img": 0, "pages.img": 0, "pages_meta.img": 0}, "runsc left an empty checkpoint.img: the checkpoint failed"},
		{"empty pages", map[string]int{"checkpoint.img": 10, "pages.img": 0, "pages_meta.img": 5}, "runsc left an empty pages.img"},
		{"none", map[string]int{}, "runsc left no checkpoint.img"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "ckpt"), 0)
			must(t, err)
			p, err := s.Begin()
			must(t, err)
			fakeImage(t, p.ImageDir(), tc.sizes)
			_, err = p.Commit(testManifest())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Commit = %v, want %q", err, tc.want)
			}
			must(t, p.Abort())
			if entries, _ := os.ReadDir(s.Dir()); len(entries) != 0 {
				t.Errorf("Abort left %v", entries)
			}
		})
	}
	t.Run("compressed: one file", func(t *testing.T) {
		s, err := Open(filepath.Join(t.TempDir(), "ckpt"), 0)
		must(t, err)
		p, err := s.Begin()
		must(t, err)
		fakeImage(t, p.ImageDir(), map[string]int{"checkpoint.img": 10})
		if _, err := p.Commit(testManifest()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBudget(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "ckpt"), 12<<10)
	must(t, err)
	first := commit(t, s) // ~4.3 KiB and its manifest
	p, err := s.Begin()
	must(t, err)
	defer p.Abort()
	fakeImage(t, p.ImageDir(), map[string]int{"checkpoint.img": 8 << 10})
	_, err = p.Commit(testManifest())
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("Commit over the budget = %v", err)
	}
	for _, w := range []string{"the 1 checkpoints kept already use", "of the 12.0 KiB budget", "raise sessions.checkpoint_budget"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q lacks %q", err, w)
		}
	}
	// Room made, the same pending commits.
	removed, err := s.Prune(func(id string) bool { return id != first.ID() })
	must(t, err)
	if len(removed) != 1 || removed[0] != first.ID() {
		t.Fatalf("Prune removed %v", removed)
	}
	ck, err := p.Commit(testManifest())
	must(t, err)
	if _, err := s.Load(ck.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(first.ID()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load of a pruned checkpoint = %v", err)
	}
}

func TestRemove(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "ckpt"), 0)
	must(t, err)
	ck := commit(t, s)
	must(t, s.Remove(ck.ID()))
	if err := s.Remove(ck.ID()); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove = %v", err)
	}
	for _, id := range []string{"../x", "ck-", "ck-../../etc", ""} {
		if _, err := s.Load(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Load(%q) = %v", id, err)
		}
	}
	if u, _ := s.Usage(); u != 0 {
		t.Errorf("Usage = %d after Remove", u)
	}
}

func TestOpenRefusesOpenDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.Chmod(dir, 0o755))
	_, err := Open(dir, 0)
	if !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "chmod 0700 "+dir) {
		t.Fatalf("Open of a 0755 dir = %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(t.TempDir(), link))
	if _, err := Open(link, 0); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("Open of a link = %v", err)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the foreign owner case is skipped")
		return
	}
	other := filepath.Join(t.TempDir(), "other")
	must(t, os.Mkdir(other, 0o700))
	must(t, os.Chown(other, 65534, 65534))
	if _, err := Open(other, 0); !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("Open of another user's dir = %v", err)
	}
}

func TestOpenSweepsDeadPending(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	s, err := Open(dir, 0)
	must(t, err)
	live, err := s.Begin()
	must(t, err)
	dead := filepath.Join(dir, pendingPrefix+"999999999-00")
	must(t, os.Mkdir(dead, 0o700))
	must(t, os.Mkdir(filepath.Join(dir, removingPrefix+"ck-1"), 0o700))
	if _, err := Open(dir, 0); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || filepath.Join(dir, entries[0].Name()) != filepath.Dir(live.ImageDir()) {
		t.Errorf("after Open: %v, want only the live pending dir", entries)
	}
}

func TestVerify(t *testing.T) {
	base := Expect{RunscVersion: "release-20260905.0+160fafc42237", Platform: "systrap", Network: "none",
		ImageDigest: "sha256:aa", SpecDigest: "sha256:bb", SkillDigests: map[string]string{"pdf": "sha256:cc"}}
	m := testManifest()
	m.ID = "ck-0123456789abcdef01234567"
	for _, tc := range []struct {
		name  string
		edit  func(e *Expect)
		field string
		text  string
	}{
		{"same", func(e *Expect) {}, "", ""},
		{"runsc", func(e *Expect) { e.RunscVersion = "release-20260906.0" }, FieldRunscVersion,
			"checkpoint ck-0123456789abcdef01234567 was made by runsc release-20260905.0+160fafc42237; this daemon runs release-20260906.0: gVisor cannot restore it. " + DefaultFix},
		{"platform", func(e *Expect) { e.Platform = "ptrace" }, FieldPlatform, "made on gVisor's systrap platform; this daemon uses ptrace"},
		{"network", func(e *Expect) { e.Network = "sandbox" }, FieldNetwork, "network mode none; the session's sandbox now gets sandbox"},
		{"image", func(e *Expect) { e.ImageDigest = "sha256:dd" }, FieldImageDigest, "made on image sha256:aa; the image is now sha256:dd"},
		{"spec", func(e *Expect) { e.SpecDigest = "" }, FieldSpecDigest, "the session's sandbox would now get (none recorded)"},
		{"skill changed", func(e *Expect) { e.SkillDigests = map[string]string{"pdf": "sha256:ee"} }, FieldSkill, `skill "pdf" at sha256:cc; it is now sha256:ee`},
		{"skill added", func(e *Expect) { e.SkillDigests = map[string]string{"pdf": "sha256:cc", "docx": "sha256:ff"} }, FieldSkill, `had no skill "docx" mounted`},
		{"skill dropped", func(e *Expect) { e.SkillDigests = nil }, FieldSkill, `had skill "pdf" mounted (sha256:cc); the session no longer mounts it`},
		{"first difference wins", func(e *Expect) { e.ImageDigest, e.RunscVersion = "x", "y" }, FieldRunscVersion, "runsc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := base
			tc.edit(&e)
			err := m.Verify(e)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var me *MismatchError
			if !errors.As(err, &me) || me.Field != tc.field || !errors.Is(err, ErrMismatch) {
				t.Fatalf("Verify = %v, want a mismatch of %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.text) || !strings.HasSuffix(err.Error(), DefaultFix) {
				t.Errorf("message %q lacks %q or the fix", err, tc.text)
			}
			me.Fix = "Call sessions.close."
			if !strings.HasSuffix(me.Error(), " Call sessions.close.") {
				t.Errorf("Fix not used: %q", me.Error())
			}
		})
	}
}

func TestParseManifest(t *testing.T) {
	h := strings.Repeat("ab", 32)
	ok := `{"format":1,"id":"ck-0123456789abcdef01234567","session":"s","parent":"","created":"2026-11-26T09:00:00Z",
"runsc_version":"r","platform":"systrap","network":"none","image":"python","image_digest":"d","spec_digest":"s",
"skill_digests":{},"files":[{"path":"image","type":"dir","size":0,"mode":448},
{"path":"image/checkpoint.img","type":"file","size":3,"mode":420,"sha256":"` + h + `"}],"total_bytes":3}`
	if m, err := ParseManifest([]byte(ok)); err != nil || m.Created != time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC) {
		t.Fatalf("ParseManifest = %+v, %v", m, err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"format", `"format":1`, `"format":2`, "format 2"},
		{"id", `"id":"ck-0123456789abcdef01234567"`, `"id":"../x"`, `invalid id "../x"`},
		{"path out", `"path":"image/checkpoint.img"`, `"path":"../checkpoint.img"`, "invalid path"},
		{"absolute", `"path":"image/checkpoint.img"`, `"path":"/etc/passwd"`, "invalid path"},
		{"unclean", `"path":"image/checkpoint.img"`, `"path":"image//checkpoint.img"`, "invalid path"},
		{"no parent dir", `"path":"image/checkpoint.img"`, `"path":"work/checkpoint.img"`, "before its directory"},
		{"total", `"total_bytes":3`, `"total_bytes":4`, "add up to 3"},
		{"digest", h, "xyz", "invalid sha256"},
		{"type", `"type":"file"`, `"type":"device"`, "unknown type"},
		{"unknown field", `"session":"s"`, `"session":"s","extra":1`, "unknown field"},
		{"trailing", `"total_bytes":3}`, `"total_bytes":3}{}`, "data after"},
		{"manifest listed", `"path":"image/checkpoint.img"`, `"path":"manifest.json"`, "invalid path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(strings.Replace(ok, tc.from, tc.to, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ParseManifest = %v, want %q", err, tc.want)
			}
		})
	}
}

// A workspace copy keeps the sandbox's modes; a 0555 or 0000 dir in it
// must not make the checkpoint impossible to remove for an ordinary user.
func TestRemoveReadOnlyDirs(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "ckpt"), 0)
	must(t, err)
	w := t.TempDir()
	for _, d := range []string{"ro", "closed"} {
		must(t, os.Mkdir(filepath.Join(w, d), 0o755))
		must(t, os.WriteFile(filepath.Join(w, d, "f"), []byte("x"), 0o444))
	}
	must(t, os.Chmod(filepath.Join(w, "ro"), 0o555))
	t.Cleanup(func() { os.Chmod(filepath.Join(w, "ro"), 0o755) })
	for _, abort := range []bool{false, true} {
		p, err := s.Begin()
		must(t, err)
		fakeImage(t, p.ImageDir(), goodImage)
		_, err = CopyTree(w, p.WorkDir())
		must(t, err)
		must(t, os.Chmod(filepath.Join(p.WorkDir(), "closed"), 0))
		if abort {
			must(t, p.Abort())
			continue
		}
		must(t, os.Chmod(filepath.Join(p.WorkDir(), "closed"), 0o755))
		ck, err := p.Commit(testManifest())
		must(t, err)
		must(t, s.Remove(ck.ID()))
	}
	if ents, _ := os.ReadDir(s.Dir()); len(ents) != 0 {
		t.Errorf("store still holds %v", ents)
	}
}
