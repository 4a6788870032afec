package containerd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Rootfs from snapshots: a sandbox whose spec names its image (an image
// skillbox built, or one from a registry) runs on a snapshot of that image
// made by containerd's snapshotter under the sandbox's lease (a dependency
// layer becomes one more layer of the image: depslayer.go), so the
// container's image and rootfs are containerd's, visible to its tooling,
// and the layers are kept or collected by containerd. A built image missing
// from the namespace is imported from the image store first; a registry
// image is pulled. A spec without an image (a rootfs that was not unpacked
// from an image, as in tests) runs on that rootfs directory, read-only, as
// the other backends run it.

// snapshotter is the containerd snapshotter rootfs snapshots are made with.
const snapshotter = defaults.DefaultSnapshotter

// rootfsInBundle is the spec's root path for a rootfs containerd mounts:
// the shim mounts the snapshot at the bundle's "rootfs".
const rootfsInBundle = "rootfs"

// imageCache remembers images known to be in containerd and unpacked in
// the snapshotter, so that a run does not ask containerd again; an entry
// is dropped when a container cannot be made from it.
type imageCache struct {
	mu     sync.Mutex // held while an image is checked, imported or pulled
	images map[imageKey]containerd.Image
}

// imageKey is an image and, for a run with one, its dependency layer.
type imageKey struct {
	ref  runtime.ImageRef
	deps string
}

// containerdName is the name of ref's image in containerd.
func containerdName(ref runtime.ImageRef) string {
	if ref.Ref != "" {
		return ref.Ref
	}
	return ImageName(ref.Name)
}

// image returns ref's image in containerd, unpacked into the snapshotter:
// imported from ref.Layout when containerd lacks it (or holds another
// digest under its name), pulled when it is a registry reference; with
// depsDir, the image of it plus that dependency layer (depslayer.go).
func (c *Containerd) image(ctx context.Context, cl *containerd.Client, ref runtime.ImageRef, depsDir string) (containerd.Image, error) {
	c.imgs.mu.Lock()
	defer c.imgs.mu.Unlock()
	key := imageKey{ref: ref, deps: depsDir}
	if img, ok := c.imgs.images[key]; ok {
		return img, nil
	}
	ctx = c.ctx(ctx)
	name := containerdName(ref)
	img, err := cl.GetImage(ctx, name)
	switch {
	case err != nil && !errdefs.IsNotFound(err):
		return nil, errkind.Errorf(runtime.ErrUnavailable, "look up image %s in containerd: %w", name, err)
	case ref.Ref != "":
		if err != nil {
			if _, err := c.PullImage(ctx, ref.Ref); err != nil {
				return nil, err
			}
			if img, err = cl.GetImage(ctx, name); err != nil {
				return nil, errkind.Errorf(runtime.ErrUnavailable, "image %s pulled but not found: %w", name, err)
			}
		}
		if ref.Digest != "" && img.Target().Digest.String() != ref.Digest {
			return nil, errkind.Errorf(runtime.ErrUnavailable, "image %s in containerd is %s now, not %s as when the run was planned: run again", name, img.Target().Digest, ref.Digest)
		}
	case err != nil || img.Target().Digest.String() != ref.Digest:
		if ref.Layout == "" {
			return nil, errkind.Errorf(runtime.ErrUnavailable, "image %s (%s) is not in containerd namespace %s: import it with skillbox images import --containerd %s", ref.Name, ref.Digest, c.namespace, ref.Name)
		}
		if _, err := c.ImportImage(ctx, ref.Layout, ref.Name, ref.Digest); err != nil {
			return nil, errkind.Errorf(runtime.ErrUnavailable, "import image %s into containerd: %w", ref.Name, err)
		}
		if img, err = cl.GetImage(ctx, name); err != nil {
			return nil, errkind.Errorf(runtime.ErrUnavailable, "image %s imported but not found: %w", name, err)
		}
	}
	if err := c.unpack(ctx, cl, img); err != nil {
		return nil, err
	}
	if depsDir != "" {
		if img, err = c.depsImage(ctx, cl, img, ref, depsDir); err != nil {
			return nil, err
		}
	}
	if c.imgs.images == nil {
		c.imgs.images = map[imageKey]containerd.Image{}
	}
	c.imgs.images[key] = img
	return img, nil
}

// unpack makes img's layers snapshots unless they are there, under a lease
// of its own so that nothing is collected half-way.
func (c *Containerd) unpack(ctx context.Context, cl *containerd.Client, img containerd.Image) error {
	ok, err := img.IsUnpacked(ctx, snapshotter)
	if err != nil {
		return errkind.Errorf(runtime.ErrUnavailable, "image %s: check its snapshots: %w", img.Name(), err)
	}
	if ok {
		return nil
	}
	l, err := cl.LeasesService().Create(ctx, leases.WithRandomID(), leases.WithExpiration(importLeaseExpiry))
	if err != nil {
		return fmt.Errorf("create unpack lease: %w", err)
	}
	defer func() { _ = cl.LeasesService().Delete(context.WithoutCancel(ctx), l) }()
	if err := img.Unpack(leases.WithLease(ctx, l.ID), snapshotter); err != nil {
		return errkind.Errorf(runtime.ErrUnavailable, "unpack image %s into containerd's %s snapshotter: %w", img.Name(), snapshotter, err)
	}
	c.log.Info("image unpacked into containerd", "name", img.Name(), "snapshotter", snapshotter)
	return nil
}

// forgetImage drops ref from the cache (its image or snapshots may have
// been removed behind skillbox's back).
func (c *Containerd) forgetImage(ref runtime.ImageRef, depsDir string) {
	c.imgs.mu.Lock()
	delete(c.imgs.images, imageKey{ref: ref, deps: depsDir})
	c.imgs.mu.Unlock()
}

// newContainer makes the sandbox's container from its spec: on a fresh
// snapshot of its image when it has one (retried once with the image
// looked up again, in case it went from containerd), else on its rootfs.
func (s *sandbox) newContainer(ctx context.Context, ropts any) (containerd.Container, error) {
	opts := []containerd.NewContainerOpts{
		containerd.WithRuntime(s.c.handler, ropts),
		containerd.WithContainerLabels(map[string]string{LabelRunDir: s.b.Dir}),
	}
	if s.spec.Image.IsZero() {
		return s.cl.NewContainer(ctx, s.spec.ID, append(opts, containerd.WithSpec(s.b.Spec))...)
	}
	s.b.Spec.Root.Path = rootfsInBundle
	if s.spec.DepsDir != "" {
		// The layer is part of the image here, not a bind mount.
		s.b.Spec.Mounts = slices.DeleteFunc(s.b.Spec.Mounts, func(m specs.Mount) bool { return m.Destination == runtime.DepsMount })
	}
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var img containerd.Image
		if img, err = s.c.image(ctx, s.cl, s.spec.Image, s.spec.DepsDir); err != nil {
			return nil, err
		}
		var ctr containerd.Container
		ctr, err = s.cl.NewContainer(ctx, s.spec.ID, append(opts, containerd.WithSpec(s.b.Spec),
			containerd.WithImageName(img.Name()), containerd.WithSnapshotter(snapshotter),
			containerd.WithNewSnapshot(s.spec.ID, img))...)
		if err == nil {
			return ctr, nil
		}
		s.c.forgetImage(s.spec.Image, s.spec.DepsDir)
		// A snapshot made before the container failed goes with the lease;
		// remove it now so the retry can use the same key.
		if serr := s.cl.SnapshotService(snapshotter).Remove(ctx, s.spec.ID); serr != nil && !errdefs.IsNotFound(serr) {
			err = errors.Join(err, serr)
			break
		}
	}
	return nil, err
}
