package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Images in containerd: skillbox's own images (built into an OCI layout by
// `skillbox images build`) are imported into containerd's content store
// under ImageName, so that containerd's tooling lists them (ctr -n skillbox
// images ls); a registry reference is pulled where a registry is reachable.

// ImagePrefix names skillbox's images in containerd: ImagePrefix + NAME.
const ImagePrefix = "skillbox.local/"

// LabelImageDigest is the label of an imported image holding the manifest
// digest it was built with.
const LabelImageDigest = "io.skillbox.image.digest"

// ImageName is the containerd image name of skillbox image name.
func ImageName(name string) string { return ImagePrefix + name + ":latest" }

// importLeaseExpiry bounds how long content written by an import that
// died half-way is kept.
const importLeaseExpiry = time.Hour

// ImportImage copies the image whose manifest is manifestDigest from the
// OCI image layout at layoutDir into containerd's content store (blobs it
// already has are not copied again) and names it ImageName(name). The
// manifest is labelled with its children, so containerd's garbage
// collector keeps them as long as the image exists.
func (c *Containerd) ImportImage(ctx context.Context, layoutDir, name, manifestDigest string) (string, error) {
	cl, err := c.connect(ctx)
	if err != nil {
		return "", err
	}
	ctx = c.ctx(ctx)
	l, err := cl.LeasesService().Create(ctx, leases.WithRandomID(), leases.WithExpiration(importLeaseExpiry))
	if err != nil {
		return "", fmt.Errorf("create import lease: %w", err)
	}
	defer func() { _ = cl.LeasesService().Delete(context.WithoutCancel(ctx), l) }()
	ctx = leases.WithLease(ctx, l.ID)

	md, err := digest.Parse(manifestDigest)
	if err != nil {
		return "", fmt.Errorf("image %s: manifest digest %q: %w", name, manifestDigest, err)
	}
	raw, err := os.ReadFile(blobPath(layoutDir, md))
	if err != nil {
		return "", fmt.Errorf("image %s: read manifest: %w", name, err)
	}
	if digest.FromBytes(raw) != md {
		return "", fmt.Errorf("image %s: manifest %s in %s does not match its digest", name, md, layoutDir)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("image %s: decode manifest: %w", name, err)
	}
	mediaType := m.MediaType
	if mediaType == "" {
		mediaType = ocispec.MediaTypeImageManifest
	}
	cs := cl.ContentStore()
	gc := map[string]string{"containerd.io/gc.ref.content.config": m.Config.Digest.String()}
	for i, layer := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if i > 0 {
			gc["containerd.io/gc.ref.content.l."+strconv.Itoa(i-1)] = layer.Digest.String()
		}
		if err := writeBlob(ctx, cs, layoutDir, layer, nil); err != nil {
			return "", fmt.Errorf("image %s: %w", name, err)
		}
	}
	target := ocispec.Descriptor{MediaType: mediaType, Digest: md, Size: int64(len(raw))}
	if err := writeBlob(ctx, cs, layoutDir, target, gc); err != nil {
		return "", fmt.Errorf("image %s: %w", name, err)
	}
	img := images.Image{Name: ImageName(name), Target: target, Labels: map[string]string{LabelImageDigest: md.String()}}
	is := cl.ImageService()
	if _, err := is.Create(ctx, img); err != nil {
		if !errdefs.IsAlreadyExists(err) {
			return "", fmt.Errorf("create image %s in containerd: %w", img.Name, err)
		}
		if _, err := is.Update(ctx, img, "target", "labels."+LabelImageDigest); err != nil {
			return "", fmt.Errorf("update image %s in containerd: %w", img.Name, err)
		}
	}
	c.log.Info("image imported into containerd", "name", img.Name, "digest", md.String(), "namespace", c.namespace)
	return img.Name, nil
}

func blobPath(layoutDir string, d digest.Digest) string {
	return filepath.Join(layoutDir, "blobs", d.Algorithm().String(), d.Encoded())
}

// writeBlob copies one blob of the layout into the content store unless it
// is there already; labels are set either way. It opens a writer even for
// a blob the store has: containerd then adds that blob to the context's
// lease (and reports it as already there), so that its garbage collector
// cannot take it, unreferenced since an image was removed, before the
// image that refers to it again exists. A look-up first would leave that
// gap open.
func writeBlob(ctx context.Context, cs content.Store, layoutDir string, desc ocispec.Descriptor, labels map[string]string) error {
	cw, err := content.OpenWriter(ctx, cs, content.WithRef("skillbox-import-"+desc.Digest.Encoded()), content.WithDescriptor(desc))
	if errdefs.IsAlreadyExists(err) {
		return labelBlob(ctx, cs, desc.Digest, labels)
	}
	if err != nil {
		return fmt.Errorf("write blob %s: %w", desc.Digest, err)
	}
	defer cw.Close()
	f, err := os.Open(blobPath(layoutDir, desc.Digest))
	if err != nil {
		return fmt.Errorf("open blob: %w", err)
	}
	defer f.Close()
	var opts []content.Opt
	if len(labels) > 0 {
		opts = append(opts, content.WithLabels(labels))
	}
	if err := content.Copy(ctx, cw, f, desc.Size, desc.Digest, opts...); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("write blob %s: %w", desc.Digest, err)
	}
	// Committed by another writer meanwhile, the blob may lack them.
	return labelBlob(ctx, cs, desc.Digest, labels)
}

// labelBlob sets labels on a blob of the content store (containerd keeps
// the labels of a blob written before, so they are set apart).
func labelBlob(ctx context.Context, cs content.Store, d digest.Digest, labels map[string]string) error {
	if len(labels) == 0 {
		return nil
	}
	fields := make([]string, 0, len(labels))
	for k := range labels {
		fields = append(fields, "labels."+k)
	}
	if _, err := cs.Update(ctx, content.Info{Digest: d, Labels: labels}, fields...); err != nil {
		return fmt.Errorf("label blob %s: %w", d, err)
	}
	return nil
}

// ErrPull: a registry reference could not be pulled.
var ErrPull = errors.New("pull failed")

// pullTimeout bounds one pull.
const pullTimeout = 15 * time.Minute

// PullImage pulls a registry reference into the namespace and returns its
// name there. A registry that cannot be reached is runtime.ErrUnavailable,
// saying so. Registries on this machine (localhost, loopback addresses) are
// spoken to over plain HTTP, as docker and ctr do; every other over HTTPS.
func (c *Containerd) PullImage(ctx context.Context, ref string) (string, error) {
	cl, err := c.connect(ctx)
	if err != nil {
		return "", err
	}
	resolver := docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchLocalhost)),
	})
	// A registry that stalls must not hold the run (and the image cache)
	// for ever.
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	img, err := cl.Pull(c.ctx(ctx), ref, containerd.WithResolver(resolver))
	if err != nil {
		return "", errkind.Wrap(runtime.ErrUnavailable, errkind.Errorf(ErrPull, "pull %s: %w (is its registry reachable from this machine? use an image built with skillbox images build and imported with skillbox images import --containerd instead)", ref, err))
	}
	c.log.Info("image pulled into containerd", "ref", ref, "digest", img.Target().Digest.String(), "namespace", c.namespace)
	return img.Name(), nil
}

// EnsureImage returns the manifest digest of registry reference ref in the
// namespace, pulling it first when containerd does not have it (a tag that
// moved on the registry is pulled again with skillbox images pull).
func (c *Containerd) EnsureImage(ctx context.Context, ref string) (string, error) {
	cl, err := c.connect(ctx)
	if err != nil {
		return "", err
	}
	img, err := cl.GetImage(c.ctx(ctx), ref)
	if errdefs.IsNotFound(err) {
		if _, err = c.PullImage(ctx, ref); err == nil {
			img, err = cl.GetImage(c.ctx(ctx), ref)
		}
	}
	if err != nil {
		if errors.Is(err, runtime.ErrUnavailable) {
			return "", err
		}
		return "", errkind.Errorf(runtime.ErrUnavailable, "image %s in containerd: %w", ref, err)
	}
	return img.Target().Digest.String(), nil
}
