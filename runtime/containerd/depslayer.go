package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Dependency layers in containerd: a run with a dependency layer (a
// directory of the layer store, mounted at runtime.DepsMount by the other
// backends) runs on an image of its own here, the run's image plus the
// layer as one more OCI layer, so that containerd holds the layer as
// content and a snapshot like the image's other layers. The image is named
// ImageName's repository with the tag "deps-" + the layer's digest, and is
// made once per (image, layer).

// LabelDepsLayer is the label of such an image naming its layer's digest.
const LabelDepsLayer = "io.skillbox.deps.layer"

// depsTagLen is how much of the layer digest the image tag carries.
const depsTagLen = 32

// layerDigestOf is the layer store's digest of a layer directory
// (<layers>/sha256-<hex>/tree), or an error for a directory that is not
// one.
func layerDigestOf(dir string) (string, error) {
	base := filepath.Base(filepath.Dir(dir))
	hexPart, ok := strings.CutPrefix(base, "sha256-")
	if filepath.Base(dir) != "tree" || !ok || len(hexPart) != 64 {
		return "", errkind.Errorf(runtime.ErrInvalidJob, "dependency layer %s is not a directory of the layer store (<layers>/sha256-<hex>/tree)", dir)
	}
	if _, err := hex.DecodeString(hexPart); err != nil {
		return "", errkind.Errorf(runtime.ErrInvalidJob, "dependency layer %s: bad digest in its path", dir)
	}
	return "sha256:" + hexPart, nil
}

// depsImage returns the image of base plus the dependency layer at dir,
// making it (content, image and unpacked snapshot) when containerd lacks
// it. It is called with c.imgs.mu held.
func (c *Containerd) depsImage(ctx context.Context, cl *containerd.Client, base containerd.Image, ref runtime.ImageRef, dir string) (containerd.Image, error) {
	layerDigest, err := layerDigestOf(dir)
	if err != nil {
		return nil, err
	}
	// Layers are built on images skillbox builds only (never a registry
	// image's), named ImagePrefix + NAME.
	repo := strings.TrimSuffix(ImageName(ref.Name), ":latest")
	name := repo + ":deps-" + strings.TrimPrefix(layerDigest, "sha256:")[:depsTagLen]
	if img, err := cl.GetImage(ctx, name); err == nil && img.Labels()[LabelImageDigest] == base.Target().Digest.String() && img.Labels()[LabelDepsLayer] == layerDigest {
		return img, c.unpack(ctx, cl, img)
	} else if err != nil && !errdefs.IsNotFound(err) {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "look up image %s in containerd: %w", name, err)
	}

	l, err := cl.LeasesService().Create(ctx, leases.WithRandomID(), leases.WithExpiration(importLeaseExpiry))
	if err != nil {
		return nil, fmt.Errorf("create import lease: %w", err)
	}
	defer func() { _ = cl.LeasesService().Delete(context.WithoutCancel(ctx), l) }()
	ctx = leases.WithLease(ctx, l.ID)
	cs := cl.ContentStore()

	layer, err := writeLayerTar(ctx, cs, c.co.StateDir, dir, strings.TrimPrefix(runtime.DepsMount, "/"))
	if err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "dependency layer %s into containerd: %w", layerDigest, err)
	}
	var m ocispec.Manifest
	if err := readJSON(ctx, cs, base.Target(), &m); err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "image %s: manifest: %w", base.Name(), err)
	}
	var cfg ocispec.Image
	if err := readJSON(ctx, cs, m.Config, &cfg); err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "image %s: config: %w", base.Name(), err)
	}
	// The layer is an uncompressed tar: its diff id is its digest.
	cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, layer.Digest)
	cfgDesc, err := writeJSON(ctx, cs, m.Config.MediaType, cfg, nil)
	if err != nil {
		return nil, err
	}
	m.Config = cfgDesc
	m.Layers = append(m.Layers, layer)
	gc := map[string]string{"containerd.io/gc.ref.content.config": cfgDesc.Digest.String()}
	for i, d := range m.Layers {
		gc["containerd.io/gc.ref.content.l."+strconv.Itoa(i)] = d.Digest.String()
	}
	mediaType := base.Target().MediaType
	target, err := writeJSON(ctx, cs, mediaType, m, gc)
	if err != nil {
		return nil, err
	}
	img := images.Image{Name: name, Target: target, Labels: map[string]string{
		LabelImageDigest: base.Target().Digest.String(), LabelDepsLayer: layerDigest}}
	is := cl.ImageService()
	if _, err := is.Create(ctx, img); err != nil {
		if !errdefs.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create image %s in containerd: %w", name, err)
		}
		if _, err := is.Update(ctx, img, "target", "labels."+LabelImageDigest, "labels."+LabelDepsLayer); err != nil {
			return nil, fmt.Errorf("update image %s in containerd: %w", name, err)
		}
	}
	c.log.Info("dependency layer imported into containerd", "name", name, "layer", layerDigest, "image", base.Name())
	out, err := cl.GetImage(ctx, name)
	if err != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "image %s made but not found: %w", name, err)
	}
	return out, c.unpack(ctx, cl, out)
}

// readJSON decodes the blob desc names from the content store.
func readJSON(ctx context.Context, cs content.Store, desc ocispec.Descriptor, v any) error {
	b, err := content.ReadBlob(ctx, cs, desc)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// writeJSON writes v as a blob of mediaType with labels.
func writeJSON(ctx context.Context, cs content.Store, mediaType string, v any, labels map[string]string) (ocispec.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
	if err := content.WriteBlob(ctx, cs, "skillbox-deps-"+desc.Digest.Encoded(), bytes.NewReader(b), desc); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("write %s %s: %w", mediaType, desc.Digest, err)
	}
	if err := labelBlob(ctx, cs, desc.Digest, labels); err != nil {
		return ocispec.Descriptor{}, err
	}
	return desc, nil
}

// writeLayerTar writes the tree at dir as an uncompressed tar layer whose
// entries sit under prefix (owned by root, modes and times as on disk,
// in a fixed order) and returns its descriptor. The tar is spooled to a
// temporary file in tmpDir first: its digest must be known before it is
// committed.
func writeLayerTar(ctx context.Context, cs content.Store, tmpDir, dir, prefix string) (ocispec.Descriptor, error) {
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return ocispec.Descriptor{}, err
	}
	tmp, err := os.CreateTemp(tmpDir, ".deps-layer-*.tar")
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(tmp, h))
	// The parent directories of prefix, then the tree under it.
	parts := strings.Split(prefix, "/")
	for i := range parts {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i+1], "/") + "/", Mode: 0o755, Format: tar.FormatPAX}); err != nil {
			return ocispec.Descriptor{}, err
		}
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // no devices, sockets or FIFOs in a layer
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = prefix + "/" + filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.AccessTime, hdr.ChangeTime = hdr.ModTime, hdr.ModTime
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := tw.Close(); err != nil {
		return ocispec.Descriptor{}, err
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(h.Sum(nil))), Size: size}
	if err := content.WriteBlob(ctx, cs, "skillbox-deps-"+desc.Digest.Encoded(), tmp, desc); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("write layer %s: %w", desc.Digest, err)
	}
	return desc, nil
}
