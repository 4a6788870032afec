package kubernetes

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/skillbox/skillbox/runtime"
)

// Images on the nodes: a skillbox image (built into the OCI layout of the
// image store, runtime.ImageRef.Layout) reaches a node's containerd as an
// OCI archive that `ctr -n k8s.io images import` takes, named by its
// digest reference (ImageReference: skillbox.local/NAME@sha256:…). The
// CRI resolves a pod's image by that exact name, so a pod runs the bytes
// of that digest and no others, with no registry. hack/kube.sh import
// feeds such an archive to the test cluster's node.

// AnnotationImageName is the index annotation containerd's importer names
// an image by.
const AnnotationImageName = "io.containerd.image.name"

// WriteImageArchive writes img, an image of the OCI layout img.Layout, to
// w as an OCI archive (oci-layout, index.json and the manifest's blobs)
// whose one image is named ImageReference(img). Every blob is checked
// against its digest on the way; a blob that does not match fails the
// archive.
func WriteImageArchive(w io.Writer, img runtime.ImageRef) error {
	if img.Layout == "" {
		return fmt.Errorf("image %s: no OCI layout to import it from", img.Name)
	}
	name, err := ImageReference(img)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(blobPath(img.Layout, img.Digest))
	if err != nil {
		return fmt.Errorf("image %s: read manifest: %w", img.Name, err)
	}
	if d := digestOf(raw); d != img.Digest {
		return fmt.Errorf("image %s: manifest in %s is %s, not %s", img.Name, img.Layout, d, img.Digest)
	}
	var m struct {
		MediaType string       `json:"mediaType"`
		Config    descriptor   `json:"config"`
		Layers    []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("image %s: decode manifest: %w", img.Name, err)
	}
	if m.MediaType == "" {
		m.MediaType = "application/vnd.oci.image.manifest.v1+json"
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{
			"mediaType":   m.MediaType,
			"digest":      img.Digest,
			"size":        len(raw),
			"annotations": map[string]string{AnnotationImageName: name},
		}},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := writeFile(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := writeFile(tw, "index.json", index); err != nil {
		return err
	}
	if err := writeFile(tw, blobName(img.Digest), raw); err != nil {
		return err
	}
	for _, d := range append([]descriptor{m.Config}, m.Layers...) {
		if err := copyBlob(tw, img.Layout, d); err != nil {
			return fmt.Errorf("image %s: %w", img.Name, err)
		}
	}
	return tw.Close()
}

type descriptor struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobName(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }

func blobPath(layout, d string) string { return filepath.Join(layout, filepath.FromSlash(blobName(d))) }

func writeFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// copyBlob streams one blob of the layout into the archive, checking its
// size and digest.
func copyBlob(tw *tar.Writer, layout string, d descriptor) error {
	if !digestPattern.MatchString(d.Digest) {
		return fmt.Errorf("blob digest %q is not sha256", d.Digest)
	}
	f, err := os.Open(blobPath(layout, d.Digest))
	if err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != d.Size {
		return fmt.Errorf("blob %s is %d bytes, the manifest says %d", d.Digest, st.Size(), d.Size)
	}
	if err := tw.WriteHeader(&tar.Header{Name: blobName(d.Digest), Mode: 0o644, Size: d.Size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tw, h), f); err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != d.Digest {
		return fmt.Errorf("blob %s in %s does not match its digest (it is %s)", d.Digest, layout, got)
	}
	return nil
}
