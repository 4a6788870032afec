package kubernetes

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	manifest := put(fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"digest":%q,"size":%d},"layers":[{"digest":%q,"size":%d}]}`,
		config.Digest, config.Size, layer.Digest, layer.Size))
	return runtime.ImageRef{Name: "tiny", Digest: manifest.Digest, Layout: dir}
}

func TestWriteImageArchive(t *testing.T) {
	img := testLayout(t)
	var buf bytes.Buffer
	if err := WriteImageArchive(&buf, img); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	files := map[string][]byte{}
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
		names = append(names, h.Name)
	}
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
