package kubernetes

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/skillbox/skillbox/runtime"
)

// writeTree makes dir with files (name → content; a content "-> T" makes
// a symlink to T, a name ending in / a directory) and returns it.
func writeTree(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(name, "/"):
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(content, "-> "):
			if err := os.Symlink(strings.TrimPrefix(content, "-> "), p); err != nil {
				t.Fatal(err)
			}
		default:
			mode := os.FileMode(0o644)
			if strings.HasSuffix(name, ".sh") {
				mode = 0o755
			}
			if err := os.WriteFile(p, []byte(content), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

var testSkill = map[string]string{
	"SKILL.md":        "---\nname: t\n---\n",
	"scripts/x.py":    "print('x')\n",
	"scripts/run.sh":  "#!/bin/sh\n",
	"scripts/link.py": "-> x.py",
	"data/":           "",
}

var testDeps = map[string]string{"python/mod.py": "V = 1\n"}

// entry is one tar entry of a layer, as the tests compare them.
type entry struct {
	name, link, data string
	mode             int64
	typ              byte
}

// layerEntries reads the layer blob d of layout, checking the fixed owner
// and time of every entry.
func layerEntries(t *testing.T, layout string, d ocispec.Descriptor) []entry {
	t.Helper()
	f, err := os.Open(blobPath(layout, d.Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var out []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("entry %s: uid %d gid %d time %s, want root and the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		b, _ := io.ReadAll(tr)
		out = append(out, entry{name: h.Name, link: h.Linkname, data: string(b), mode: h.Mode, typ: h.Typeflag})
	}
}

func derivedManifest(t *testing.T, img runtime.ImageRef) ocispec.Manifest {
	t.Helper()
	var m ocispec.Manifest
	if err := readBlobJSON(img.Layout, img.Digest, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestArtifactBuild(t *testing.T) {
	base := testLayout(t)
	skill := writeTree(t, t.TempDir(), testSkill)
	deps := writeTree(t, t.TempDir(), testDeps)
	job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: "r1", Image: base, SkillDir: skill, DepsDir: deps}, Invocation: runtime.Invocation{Args: []string{"true"}}}

	a := NewArtifacts(t.TempDir())
	img, err := a.Build(job)
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != base.Name || img.Layout != a.Dir() || img.Digest == base.Digest {
		t.Fatalf("derived image %+v, want %s in %s with a digest of its own", img, base.Name, a.Dir())
	}

	t.Run("Content", func(t *testing.T) {
		m := derivedManifest(t, img)
		var bm ocispec.Manifest
		if err := readBlobJSON(base.Layout, base.Digest, &bm); err != nil {
			t.Fatal(err)
		}
		if len(m.Layers) != len(bm.Layers)+2 || m.Layers[0].Digest != bm.Layers[0].Digest || m.Annotations[AnnotationBaseDigest] != base.Digest {
			t.Fatalf("derived manifest %+v, want the base's layers, then two, and the base digest annotated", m)
		}
		var cfg ocispec.Image
		if err := readBlobJSON(img.Layout, m.Config.Digest.String(), &cfg); err != nil {
			t.Fatal(err)
		}
		if n := len(cfg.RootFS.DiffIDs); n < 2 || cfg.RootFS.DiffIDs[n-2] != m.Layers[len(m.Layers)-2].Digest || cfg.RootFS.DiffIDs[n-1] != m.Layers[len(m.Layers)-1].Digest {
			t.Errorf("config diff ids %v, want them to end with the new layers' digests", cfg.RootFS.DiffIDs)
		}
		// Every blob of the derived image is in one of its layouts.
		layouts := a.Blobs(img, base)
		for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			found := false
			for _, l := range layouts {
				if st, err := os.Stat(blobPath(l, d.Digest.String())); err == nil && st.Size() == d.Size {
					found = true
				}
			}
			if !found {
				t.Errorf("blob %s is in none of %v", d.Digest, layouts)
			}
		}
		want := []entry{
			{name: "skill/", mode: 0o755, typ: tar.TypeDir},
			{name: "skill/SKILL.md", mode: 0o644, typ: tar.TypeReg, data: testSkill["SKILL.md"]},
			{name: "skill/data/", mode: 0o755, typ: tar.TypeDir},
			{name: "skill/scripts/", mode: 0o755, typ: tar.TypeDir},
			{name: "skill/scripts/link.py", mode: 0o755, typ: tar.TypeSymlink, link: "x.py"},
			{name: "skill/scripts/run.sh", mode: 0o755, typ: tar.TypeReg, data: testSkill["scripts/run.sh"]},
			{name: "skill/scripts/x.py", mode: 0o644, typ: tar.TypeReg, data: testSkill["scripts/x.py"]},
		}
		if got := layerEntries(t, img.Layout, m.Layers[len(m.Layers)-2]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("skill layer:\n%v\nwant\n%v", got, want)
		}
		want = []entry{
			{name: "opt/", mode: 0o755, typ: tar.TypeDir},
			{name: "opt/python/", mode: 0o755, typ: tar.TypeDir},
			{name: "opt/python/mod.py", mode: 0o644, typ: tar.TypeReg, data: testDeps["python/mod.py"]},
		}
		if got := layerEntries(t, img.Layout, m.Layers[len(m.Layers)-1]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("deps layer:\n%v\nwant\n%v", got, want)
		}
	})

	t.Run("Deterministic", func(t *testing.T) {
		// The same bytes elsewhere, later, with other modes' noise (group
		// write, setuid) that a layer never carries: the same digest.
		time.Sleep(10 * time.Millisecond)
		skill2 := writeTree(t, t.TempDir(), testSkill)
		if err := os.Chmod(filepath.Join(skill2, "scripts", "run.sh"), 0o4775); err != nil {
			t.Fatal(err)
		}
		deps2 := writeTree(t, t.TempDir(), testDeps)
		j := job
		j.Sandbox.ID, j.Sandbox.SkillDir, j.Sandbox.DepsDir = "r2", skill2, deps2
		again, err := NewArtifacts(t.TempDir()).Build(j)
		if err != nil {
			t.Fatal(err)
		}
		if again.Digest != img.Digest {
			t.Errorf("the same inputs gave %s, then %s", img.Digest, again.Digest)
		}
		same, err := a.Build(job)
		if err != nil || same.Digest != img.Digest {
			t.Errorf("a second build in the same layout: %v %v, want %s", same, err, img.Digest)
		}
	})

	t.Run("ChangesChangeTheDigest", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			change func(skill, deps string) error
		}{
			{"SkillByte", func(s, _ string) error {
				return os.WriteFile(filepath.Join(s, "scripts", "x.py"), []byte("print('y')\n"), 0o644)
			}},
			{"ExecBit", func(s, _ string) error { return os.Chmod(filepath.Join(s, "scripts", "x.py"), 0o755) }},
			{"NewFile", func(s, _ string) error { return os.WriteFile(filepath.Join(s, "data", "n"), nil, 0o644) }},
			{"LinkTarget", func(s, _ string) error {
				p := filepath.Join(s, "scripts", "link.py")
				if err := os.Remove(p); err != nil {
					return err
				}
				return os.Symlink("run.sh", p)
			}},
			{"DepsByte", func(_, d string) error {
				return os.WriteFile(filepath.Join(d, "python", "mod.py"), []byte("V = 2\n"), 0o644)
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				j := job
				j.Sandbox.SkillDir, j.Sandbox.DepsDir = writeTree(t, t.TempDir(), testSkill), writeTree(t, t.TempDir(), testDeps)
				if err := tc.change(j.Sandbox.SkillDir, j.Sandbox.DepsDir); err != nil {
					t.Fatal(err)
				}
				got, err := a.Build(j)
				if err != nil {
					t.Fatal(err)
				}
				if got.Digest == img.Digest {
					t.Errorf("a changed input kept the digest %s", got.Digest)
				}
			})
		}
	})
}

func TestArtifactSkillsAndProgram(t *testing.T) {
	base := testLayout(t)
	one := writeTree(t, t.TempDir(), map[string]string{"a.py": "A\n"})
	two := writeTree(t, t.TempDir(), map[string]string{"b.py": "B\n"})
	job := runtime.Job{
		Sandbox:    runtime.SandboxSpec{ID: "r", Image: base, Skills: []runtime.SkillBind{{Source: two, Target: runtime.SkillTarget("two")}, {Source: one, Target: runtime.SkillTarget("one")}}, Program: &runtime.Program{Name: "main.py", Data: []byte("print(1)\n")}},
		Invocation: runtime.Invocation{Args: []string{"true"}},
	}
	a := NewArtifacts(t.TempDir())
	img, err := a.Build(job)
	if err != nil {
		t.Fatal(err)
	}
	m := derivedManifest(t, img)
	want := []entry{
		{name: "skills/", mode: 0o755, typ: tar.TypeDir},
		{name: "skills/.code/", mode: 0o555, typ: tar.TypeDir},
		{name: "skills/.code/main.py", mode: 0o444, typ: tar.TypeReg, data: "print(1)\n"},
		{name: "skills/one/", mode: 0o755, typ: tar.TypeDir},
		{name: "skills/one/a.py", mode: 0o644, typ: tar.TypeReg, data: "A\n"},
		{name: "skills/two/", mode: 0o755, typ: tar.TypeDir},
		{name: "skills/two/b.py", mode: 0o644, typ: tar.TypeReg, data: "B\n"},
	}
	if got := layerEntries(t, img.Layout, m.Layers[len(m.Layers)-1]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("skills layer:\n%v\nwant\n%v", got, want)
	}
}

func TestArtifactRefusals(t *testing.T) {
	base := testLayout(t)
	fifo := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifo, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		job  runtime.Job
		want string
		kind error
	}{
		{"Whiteout", runtime.Job{Sandbox: runtime.SandboxSpec{Image: base, SkillDir: writeTree(t, t.TempDir(), map[string]string{"d/.wh.x": ""})}}, "whiteout", nil},
		{"OpaqueWhiteout", runtime.Job{Sandbox: runtime.SandboxSpec{Image: base, DepsDir: writeTree(t, t.TempDir(), map[string]string{".wh..wh..opq": ""})}}, "whiteout", nil},
		{"FIFO", runtime.Job{Sandbox: runtime.SandboxSpec{Image: base, SkillDir: fifo}}, "only directories, regular files and symlinks", nil},
		{"NotADirectory", runtime.Job{Sandbox: runtime.SandboxSpec{Image: base, SkillDir: filepath.Join(fifo, "pipe")}}, "not a directory", nil},
		{"NoLayout", runtime.Job{Sandbox: runtime.SandboxSpec{Image: runtime.ImageRef{Name: "x", Digest: base.Digest}, SkillDir: fifo}}, "no OCI layout", runtime.ErrUnavailable},
		{"RegistryImage", runtime.Job{Sandbox: runtime.SandboxSpec{Image: runtime.ImageRef{Name: "x", Digest: base.Digest, Ref: "example.com/x:1", Layout: base.Layout}, SkillDir: fifo}}, "no OCI layout", runtime.ErrUnavailable},
		{"Session", runtime.Job{Sandbox: runtime.SandboxSpec{Image: base, Session: &runtime.SessionMounts{}}}, "sessions", runtime.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.job.Sandbox.ID = "r"
			_, err := NewArtifacts(t.TempDir()).Build(tc.job)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.kind != nil && !errors.Is(err, tc.kind)) {
				t.Errorf("Build: %v, want an error saying %q (%v)", err, tc.want, tc.kind)
			}
		})
	}
}

// TestArtifactsDirPrivate: the derived images hold the skills' files, so
// their directory is closed to every other uid, also one found open.
func TestArtifactsDirPrivate(t *testing.T) {
	base := testLayout(t)
	skill := writeTree(t, t.TempDir(), testSkill)
	dir := filepath.Join(t.TempDir(), "artifacts")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewArtifacts(dir).Build(runtime.Job{Sandbox: runtime.SandboxSpec{ID: "r1", Image: base, SkillDir: skill}, Invocation: runtime.Invocation{Args: []string{"true"}}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "blobs"), filepath.Join(dir, "blobs", "sha256")} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", p, st.Mode().Perm())
		}
	}
}
