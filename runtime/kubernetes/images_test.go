package kubernetes

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/skillbox/skillbox/runtime"
)

// testLayout makes an OCI layout holding one image (a config and one
// layer) and returns it as a job names it.
func testLayout(t *testing.T) runtime.ImageRef {
	t.Helper()
	dir := t.TempDir()
	put := func(b []byte) descriptor {
		d := digestOf(b)
		p := blobPath(dir, d)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return descriptor{Digest: d, Size: int64(len(b))}
	}
	config := put([]byte(`{"architecture":"amd64","os":"linux"}`))
	layer := put([]byte("layer bytes"))
	manifest := put(fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":%q,"size":%d}]}`,
		config.Digest, config.Size, layer.Digest, layer.Size))
	return runtime.ImageRef{Name: "tiny", Digest: manifest.Digest, Layout: dir}
}

// readArchive reads a tar archive: each file's bytes, and the names in
// their order.
func readArchive(t *testing.T, r io.Reader) (map[string][]byte, []string) {
	t.Helper()
	tr := tar.NewReader(r)
	files := map[string][]byte{}
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, names
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
		names = append(names, h.Name)
	}
}

func TestWriteImageArchive(t *testing.T) {
	img := testLayout(t)
	var buf bytes.Buffer
	if err := WriteImageArchive(&buf, img); err != nil {
		t.Fatal(err)
	}
	files, names := readArchive(t, &buf)
	if len(names) != 5 || names[0] != "oci-layout" || names[1] != "index.json" || names[2] != blobName(img.Digest) {
		t.Errorf("archive holds %q", names)
	}
	for _, n := range names[2:] {
		if digestOf(files[n]) != "sha256:"+strings.TrimPrefix(n, "blobs/sha256/") {
			t.Errorf("blob %s does not match its name", n)
		}
	}
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Digest != img.Digest ||
		index.Manifests[0].Annotations[AnnotationImageName] != "skillbox.local/tiny@"+img.Digest {
		t.Errorf("index.json: %s", files["index.json"])
	}
}

// TestWriteImageArchiveImages: images of several layouts go in one
// archive, each named by its digest reference, each blob once.
func TestWriteImageArchiveImages(t *testing.T) {
	a, b := testLayout(t), testLayout(t) // the same blobs, in two layouts
	b.Name = "tiny-too"
	var buf bytes.Buffer
	if err := WriteImageArchive(&buf, a, b); err != nil {
		t.Fatal(err)
	}
	files, names := readArchive(t, &buf)
	if len(names) != 5 {
		t.Errorf("archive holds %q, want oci-layout, index.json and 3 blobs, each once", names)
	}
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, m := range index.Manifests {
		refs = append(refs, m.Annotations[AnnotationImageName])
	}
	want := []string{"skillbox.local/tiny@" + a.Digest, "skillbox.local/tiny-too@" + b.Digest}
	if strings.Join(refs, " ") != strings.Join(want, " ") {
		t.Errorf("index names %q, want %q", refs, want)
	}
	if err := WriteImageArchive(io.Discard); err == nil {
		t.Error("WriteImageArchive of no images: no error")
	}
}

func TestWriteImageArchiveRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*runtime.ImageRef)
		want string
	}{
		{"no layout", func(r *runtime.ImageRef) { r.Layout = "" }, "no OCI layout"},
		{"no digest", func(r *runtime.ImageRef) { r.Digest = "" }, "by digest only"},
		{"unknown manifest", func(r *runtime.ImageRef) { r.Digest = "sha256:" + strings.Repeat("0", 64) }, "read manifest"},
		{"corrupt layer", func(r *runtime.ImageRef) {
			entries, _ := os.ReadDir(filepath.Join(r.Layout, "blobs", "sha256"))
			for _, e := range entries {
				p := filepath.Join(r.Layout, "blobs", "sha256", e.Name())
				if b, _ := os.ReadFile(p); string(b) == "layer bytes" {
					os.WriteFile(p, []byte("LAYER BYTES"), 0o644)
				}
			}
		}, "does not match its digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := testLayout(t)
			tc.edit(&img)
			err := WriteImageArchive(io.Discard, img)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("WriteImageArchive = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// testBackend is a backend with its artifacts in a test dir, and a
// registry (served by a testRegistry on loopback) when withRegistry.
func testBackend(t *testing.T, withRegistry bool) (*Kubernetes, *testRegistry, string) {
	t.Helper()
	var o Options
	reg := newTestRegistry(t)
	if withRegistry {
		srv := httptest.NewServer(reg)
		t.Cleanup(srv.Close)
		o.Registry = strings.TrimPrefix(srv.URL, "http://") + "/sb"
	}
	k, err := New(runtime.Options{Backend: o})
	if err != nil {
		t.Fatal(err)
	}
	k.artifacts = NewArtifacts(t.TempDir())
	return k, reg, o.Registry
}

func TestNodeImage(t *testing.T) {
	base := testLayout(t)
	skill := writeTree(t, t.TempDir(), testSkill)
	deps := writeTree(t, t.TempDir(), testDeps)
	plain := runtime.Job{Sandbox: runtime.SandboxSpec{ID: "r", Image: base}, Invocation: runtime.Invocation{Args: []string{"true"}}}
	withSkill := runtime.Job{Sandbox: runtime.SandboxSpec{ID: "r", Image: base, SkillDir: skill, DepsDir: deps}, Invocation: runtime.Invocation{Args: []string{"true"}}}
	derived, err := NewArtifacts(t.TempDir()).Build(withSkill)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("NoRegistry", func(t *testing.T) {
		k, _, _ := testBackend(t, false)
		for _, tc := range []struct {
			job  runtime.Job
			want string
		}{
			{plain, ImagePrefix + "tiny@" + base.Digest},
			{withSkill, ImagePrefix + "tiny@" + derived.Digest},
		} {
			if got, err := k.nodeImage(t.Context(), tc.job); got != tc.want || err != nil {
				t.Errorf("nodeImage = %q, %v; want %q", got, err, tc.want)
			}
		}
	})

	t.Run("Registry", func(t *testing.T) {
		k, reg, repo := testBackend(t, true)
		for _, tc := range []struct {
			job    runtime.Job
			digest string
		}{
			{withSkill, derived.Digest},
			{plain, base.Digest},
		} {
			want := repo + "/tiny@" + tc.digest
			got, err := k.nodeImage(t.Context(), tc.job)
			if got != want || err != nil {
				t.Fatalf("nodeImage = %q, %v; want %q", got, err, want)
			}
			raw := reg.manifestOf("sb/tiny", tc.digest)
			if digestOf(raw) != tc.digest {
				t.Fatalf("the registry has no manifest %s (%d bytes)", tc.digest, len(raw))
			}
			var m ocispec.Manifest
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
				if !reg.hasBlob(d.Digest.String()) {
					t.Errorf("the registry lacks blob %s of %s", d.Digest, tc.digest)
				}
			}
			// Once per digest: a second run pushes nothing.
			puts := reg.putCount()
			if got, err := k.nodeImage(t.Context(), tc.job); got != want || err != nil || reg.putCount() != puts {
				t.Errorf("second nodeImage = %q, %v with %d more PUTs; want %q and none", got, err, reg.putCount()-puts, want)
			}
		}
	})

	t.Run("RegistryDown", func(t *testing.T) {
		k, err := New(runtime.Options{Backend: Options{Registry: "127.0.0.1:1/sb"}})
		if err != nil {
			t.Fatal(err)
		}
		k.artifacts = NewArtifacts(t.TempDir())
		if _, err := k.nodeImage(t.Context(), withSkill); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1/sb") {
			t.Errorf("nodeImage with the registry down: %v, want ErrUnavailable naming it", err)
		}
	})
}

func TestParseRegistry(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"127.0.0.1:5000/skillbox", true},
		{"registry.example.com/team/skillbox", true},
		{"localhost:5000/sb", true},
		{"skillbox", false},         // no host
		{"example.com/sb:1", false}, // a tag
		{"Example.com/SB", false},   // not lowercase
		{"example.com/sb@" + testDigest, false},
		{"", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRegistry(tc.in)
			if (err == nil) != tc.ok || (tc.ok && got != tc.in) {
				t.Errorf("ParseRegistry(%q) = %q, %v; want ok %v", tc.in, got, err, tc.ok)
			}
		})
	}
	if _, err := New(runtime.Options{Backend: Options{Registry: "nohost"}}); err == nil || !strings.Contains(err.Error(), "HOST[:PORT]/REPO") {
		t.Errorf("New with a bad registry: %v, want an error saying the form", err)
	}
}
