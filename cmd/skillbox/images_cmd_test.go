package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/kubernetes"
)

func runImagesCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	err := app.Run(append([]string{"skillbox", "images"}, args...))
	return out.String(), err
}

func TestImagesListEmptyStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	out, err := runImagesCLI(t, "list", "--dir", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var entries []listEntry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(entries) != 4 || entries[0].Name != "node" || entries[0].Built {
		t.Errorf("entries: %+v", entries)
	}
	out, err = runImagesCLI(t, "list", "--dir", dir)
	if err != nil || !strings.Contains(out, "not built (skillbox images build python)") {
		t.Errorf("table: %q %v", out, err)
	}
}

func TestImagesBuildUnknownName(t *testing.T) {
	_, err := runImagesCLI(t, "build", "--dir", filepath.Join(t.TempDir(), "store"), "cobol")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(ee.msg, "known: node, python, python-slim, shell") {
		t.Errorf("err = %v", err)
	}
	_, err = runImagesCLI(t, "list", "--recipes", filepath.Join(t.TempDir(), "missing"))
	if !errors.As(err, &ee) || ee.code != 2 {
		t.Errorf("missing recipes dir: %v", err)
	}
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Second: "just now", 61 * time.Second: "1 minute ago", 5 * time.Minute: "5 minutes ago",
		3 * time.Hour: "3 hours ago", 72 * time.Hour: "3 days ago",
	} {
		if got := age(time.Now().Add(-d)); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
	if age(time.Time{}) != "?" {
		t.Error("zero time")
	}
}

// fakeStoreImage writes an image named name (a config and one layer) into
// the OCI layout of the image store dir, as a build would, and returns its
// manifest digest.
func fakeStoreImage(t *testing.T, dir, name string) string {
	t.Helper()
	oci := filepath.Join(dir, "oci")
	put := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		p := filepath.Join(oci, "blobs", "sha256", h)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + h, len(b)
	}
	cfg, cfgSize := put([]byte(`{"architecture":"amd64","os":"linux","config":{}}`))
	layer, layerSize := put([]byte("layer of " + name))
	manifest, manifestSize := put(fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":%q,"size":%d}]}`,
		cfg, cfgSize, layer, layerSize))
	var index struct {
		SchemaVersion int              `json:"schemaVersion"`
		Manifests     []map[string]any `json:"manifests"`
	}
	index.SchemaVersion = 2
	if b, err := os.ReadFile(filepath.Join(oci, "index.json")); err == nil {
		if err := json.Unmarshal(b, &index); err != nil {
			t.Fatal(err)
		}
	}
	index.Manifests = append(index.Manifests, map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest, "size": manifestSize,
		"annotations": map[string]string{"org.opencontainers.image.ref.name": name},
	})
	b, _ := json.Marshal(index)
	if err := os.WriteFile(filepath.Join(oci, "index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return manifest
}

// TestImagesExport: export writes the images as one archive in which each
// is named by the digest reference the kubernetes runtime's pods run.
func TestImagesExport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	py, sh := fakeStoreImage(t, dir, "python"), fakeStoreImage(t, dir, "shell")
	archiveRefs := func(t *testing.T, path string) []string {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if err != nil {
				t.Fatalf("no index.json in %s: %v", path, err)
			}
			if h.Name != "index.json" {
				continue
			}
			var index struct {
				Manifests []struct{ Annotations map[string]string }
			}
			if err := json.NewDecoder(tr).Decode(&index); err != nil {
				t.Fatal(err)
			}
			var refs []string
			for _, m := range index.Manifests {
				refs = append(refs, m.Annotations[kubernetes.AnnotationImageName])
			}
			return refs
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"all", nil, []string{"skillbox.local/python@" + py, "skillbox.local/shell@" + sh}},
		{"named", []string{"shell"}, []string{"skillbox.local/shell@" + sh}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "images.tar")
			stdout, err := runImagesCLI(t, append([]string{"export", "--dir", dir, "--out", out}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			got := archiveRefs(t, out)
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("archive names %q, want %q", got, tc.want)
			}
			for _, ref := range tc.want {
				if !strings.Contains(stdout, ref) {
					t.Errorf("output %q does not name %s", stdout, ref)
				}
			}
		})
	}
	var ee *exitError
	if _, err := runImagesCLI(t, "export", "--dir", dir); !errors.As(err, &ee) || ee.code != 2 {
		t.Errorf("no --out: %v, want a usage error", err)
	}
	if _, err := runImagesCLI(t, "export", "--dir", dir, "--out", filepath.Join(t.TempDir(), "x.tar"), "node"); !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(ee.msg, "skillbox images build node") {
		t.Errorf("an image not built: %v, want an error naming its build", err)
	}
	if _, err := runImagesCLI(t, "export", "--dir", filepath.Join(t.TempDir(), "empty"), "--out", filepath.Join(t.TempDir(), "x.tar")); !errors.As(err, &ee) || !strings.Contains(ee.msg, "no built images") {
		t.Errorf("an empty store: %v", err)
	}
}
