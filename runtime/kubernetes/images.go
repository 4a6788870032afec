package kubernetes

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
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

// WriteImageArchive writes imgs, images of OCI layouts (each its own
// img.Layout), to w as one OCI archive (oci-layout, index.json and the
// manifests' blobs, each blob once) in which each image is named
// ImageReference(img). A blob is taken from its image's layout, else from
// another image's (an agent's image adds one layer to its interpreter
// image's, in a layout of its own: AgentImages). Every blob is checked
// against its digest on the way; a blob that does not match fails the
// archive. One archive for all
// of a node's images is one import per node (hack/kube.sh import,
// `skillbox images export`).
func WriteImageArchive(w io.Writer, imgs ...runtime.ImageRef) error {
	if len(imgs) == 0 {
		return errors.New("image archive: no images to write")
	}
	type entry struct {
		img   runtime.ImageRef
		raw   []byte
		blobs []descriptor
		ref   string
		mtype string
	}
	entries := make([]entry, 0, len(imgs))
	manifests := make([]map[string]any, 0, len(imgs))
	var layouts []string
	for _, img := range imgs {
		if img.Layout == "" {
			return fmt.Errorf("image %s: no OCI layout to import it from", img.Name)
		}
		if !slices.Contains(layouts, img.Layout) {
			layouts = append(layouts, img.Layout)
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
		entries = append(entries, entry{img: img, raw: raw, blobs: append([]descriptor{m.Config}, m.Layers...)})
		manifests = append(manifests, map[string]any{
			"mediaType":   m.MediaType,
			"digest":      img.Digest,
			"size":        len(raw),
			"annotations": map[string]string{AnnotationImageName: name},
		})
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     manifests,
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
	written := map[string]bool{}
	for _, e := range entries {
		if !written[e.img.Digest] {
			if err := writeFile(tw, blobName(e.img.Digest), e.raw); err != nil {
				return err
			}
			written[e.img.Digest] = true
		}
		for _, d := range e.blobs {
			if written[d.Digest] {
				continue
			}
			layout := e.img.Layout
			if !fileExists(blobPath(layout, d.Digest)) {
				if i := slices.IndexFunc(layouts, func(l string) bool { return fileExists(blobPath(l, d.Digest)) }); i >= 0 {
					layout = layouts[i]
				}
			}
			if err := copyBlob(tw, layout, d); err != nil {
				return fmt.Errorf("image %s: %w", e.img.Name, err)
			}
			written[d.Digest] = true
		}
	}
	return tw.Close()
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
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

// Images from a registry: with runtime "kubernetes" { registry =
// "HOST[:PORT]/REPO" }, skillbox pushes each image a pod runs (a skillbox
// image, or a run's derived image, see artifact.go) to REPO/NAME by its
// digest, once, and the pod names it there by digest: the nodes pull
// exactly those bytes. The push is containerd's (remotes/docker); a
// registry on a loopback address is spoken to over plain HTTP, any other
// over HTTPS, without credentials.

// registry pushes images of OCI layouts to one repository.
type registry struct {
	repo     string // HOST[:PORT]/REPO
	resolver remotes.Resolver

	mu   sync.Mutex
	refs map[string]*pushed // by reference
}

// pushed is one reference's push: done once it succeeded; mu is held
// while it runs, so a reference is pushed once at a time, and other
// references meanwhile.
type pushed struct {
	mu   sync.Mutex
	done bool
}

func newRegistry(repo string) *registry {
	return &registry{
		repo:     repo,
		resolver: docker.NewResolver(docker.ResolverOptions{Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchLocalhost))}),
		refs:     map[string]*pushed{},
	}
}

// ParseRegistry checks a registry setting: a repository with a host
// (HOST[:PORT]/REPO), no tag and no digest.
func ParseRegistry(s string) (string, error) {
	named, err := reference.ParseNamed(s)
	if err == nil && reference.Domain(named) != "" && named.String() == s {
		if _, tagged := named.(reference.Tagged); !tagged {
			if _, digested := named.(reference.Digested); !digested {
				return s, nil
			}
		}
	}
	why := ""
	if err != nil {
		why = ": " + err.Error()
	}
	return "", fmt.Errorf("registry %q is not a repository HOST[:PORT]/REPO (lowercase, no tag, no digest)%s", s, why)
}

// reference is where img is in the registry, by digest.
func (r *registry) reference(img runtime.ImageRef) (string, error) {
	if !repoPattern.MatchString(img.Name) {
		return "", errkind.Errorf(runtime.ErrInvalidJob, "image name %q cannot name an image in a registry: use lowercase letters, digits and . _ - /", img.Name)
	}
	return r.repo + "/" + img.Name + "@" + img.Digest, nil
}

// push pushes img, whose blobs are in layouts (the first that has one),
// unless it was pushed before, and returns its reference.
func (r *registry) push(ctx context.Context, img runtime.ImageRef, layouts []string) (string, error) {
	ref, err := r.reference(img)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	p := r.refs[ref]
	if p == nil {
		p = &pushed{}
		r.refs[ref] = p
	}
	r.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return ref, nil
	}
	raw, err := os.ReadFile(blobPath(layouts[0], img.Digest))
	if err != nil {
		return "", fmt.Errorf("image %s: read manifest: %w", img.Name, err)
	}
	var m struct {
		MediaType string `json:"mediaType"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("image %s: decode manifest: %w", img.Name, err)
	}
	if m.MediaType == "" {
		m.MediaType = ocispec.MediaTypeImageManifest
	}
	desc := ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.Digest(img.Digest), Size: int64(len(raw))}
	pusher, err := r.resolver.Pusher(ctx, ref)
	if err != nil {
		return "", errkind.Errorf(runtime.ErrUnavailable, "push %s: %w", ref, err)
	}
	if err := remotes.PushContent(ctx, pusher, desc, layoutProvider(layouts), nil, platforms.All, nil); err != nil {
		return "", errkind.Errorf(runtime.ErrUnavailable, "push image %s to the registry %s (runtime %q { registry }): %w: check that the registry is up and this host reaches it", ref, r.repo, Name, err)
	}
	p.done = true
	return ref, nil
}

// layoutProvider serves the blobs of OCI layouts, from the first that has
// each.
type layoutProvider []string

var _ content.Provider = layoutProvider(nil)

func (p layoutProvider) ReaderAt(_ context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	if !digestPattern.MatchString(desc.Digest.String()) {
		return nil, fmt.Errorf("blob digest %q is not sha256", desc.Digest)
	}
	for _, l := range p {
		ra, err := local.OpenReader(blobPath(l, desc.Digest.String()))
		if err == nil {
			return ra, nil
		}
		if !errdefs.IsNotFound(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("blob %s is in none of %s: %w", desc.Digest, strings.Join(p, ", "), errdefs.ErrNotFound)
}

// nodeImage is the reference the pod of job runs: its image, or the
// derived image of its skill files and dependency layer (needsArtifact);
// with a registry, pushed there first. Without one, the image must be on
// the nodes already (imported by digest, as hack/kube.sh import does).
func (k *Kubernetes) nodeImage(ctx context.Context, job runtime.Job) (string, error) {
	if err := unsupported(job); err != nil {
		return "", err
	}
	if _, err := ImageReference(job.Sandbox.Image); err != nil {
		return "", fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
	}
	img, layouts := job.Sandbox.Image, []string{job.Sandbox.Image.Layout}
	if needsArtifact(job) {
		derived, err := k.artifacts.Build(job)
		if err != nil {
			return "", err
		}
		img, layouts = derived, k.artifacts.Blobs(derived, job.Sandbox.Image)
		k.log.Debug("derived image built", "id", job.Sandbox.ID, "image", job.Sandbox.Image.Name, "base", job.Sandbox.Image.Digest, "digest", derived.Digest)
	}
	return k.reference(ctx, job, img, layouts)
}

// reference is the reference a node runs img (of the layouts) by: its
// registry copy, pushed first, when the backend has a registry; else the
// image as imported into the nodes.
func (k *Kubernetes) reference(ctx context.Context, job runtime.Job, img runtime.ImageRef, layouts []string) (string, error) {
	if k.registry == nil || img.Ref != "" || img.Layout == "" {
		// A registry image is pulled from where it is; an image with no
		// layout here cannot be pushed, and must be on the nodes.
		ref, err := ImageReference(img)
		if err != nil {
			return "", fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
		}
		return ref, nil
	}
	ref, err := k.registry.push(ctx, img, layouts)
	if err != nil {
		return "", fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
	}
	return ref, nil
}
