package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// StoreImages supplies rootfs from the local image store, building an image
// from its recipe on first use when Build is set; a registry image (an
// image block with ref) comes from Puller instead, without a rootfs on the
// host.
type StoreImages struct {
	Store   *images.Store
	Recipes map[string]*images.Recipe
	// Registry maps image names to the registry references they are
	// pulled from; Puller pulls them (the containerd runtime; nil when
	// the runtime cannot run registry images).
	Registry map[string]string
	Puller   RegistryPuller
	// Build lets Ensure build a missing image (minutes, inside the call that
	// needs it). Without it a missing image fails fast with errkind.Unavailable,
	// naming the command that builds it.
	Build bool

	progMu   sync.Mutex
	programs map[string]*deps.Programs // by image digest
}

var (
	_ ImageSource   = (*StoreImages)(nil)
	_ ImageChecker  = (*StoreImages)(nil)
	_ BuiltChecker  = (*StoreImages)(nil)
	_ ProgramLister = (*StoreImages)(nil)
)

// Programs implements ProgramLister: the programs of a built, unpacked
// image, listed once per image digest.
func (s *StoreImages) Programs(name string) (*deps.Programs, error) {
	if ref, ok, _ := s.registryImage(name); ok {
		return nil, fmt.Errorf("image %q is the registry image %s: it has no rootfs on this host", name, ref)
	}
	r, ok := s.Recipes[name]
	if !ok || s.Store == nil {
		return nil, errkind.Errorf(images.ErrUnknownImage, "no recipe named %q", name)
	}
	img, err := s.Store.Get(r.Name)
	if err != nil {
		return nil, err
	}
	s.progMu.Lock()
	defer s.progMu.Unlock()
	if p, ok := s.programs[img.Digest]; ok {
		return p, nil
	}
	root, ok := s.Store.UnpackedRootFS(img)
	if !ok {
		return nil, errkind.Errorf(images.ErrNotBuilt, "image %q is built but not unpacked yet", name)
	}
	p := deps.ListPrograms(root)
	if s.programs == nil {
		s.programs = map[string]*deps.Programs{}
	}
	s.programs[img.Digest] = p
	return p, nil
}

// BuiltChecker is an ImageSource that can tell whether an image is built
// already: warming a skill and skills.check use an image only then, since
// neither may build one.
type BuiltChecker interface {
	Built(name string) error
}

// RegistryPuller yields registry images: the manifest digest of ref,
// pulled first when it is not there yet.
type RegistryPuller interface {
	EnsureImage(ctx context.Context, ref string) (digest string, err error)
}

// registryImage says whether name is a registry image, and whether it can
// run here.
func (s *StoreImages) registryImage(name string) (ref string, ok bool, err error) {
	ref, ok = s.Registry[name]
	if ok && s.Puller == nil {
		err = errkind.Errorf(errkind.Unavailable, "image %q is the registry image %s, which only the containerd runtime runs (it pulls and unpacks it): use --runtime containerd or daemon { runtime = \"containerd\" }, or map the extension to an image skillbox builds", name, ref)
	}
	return ref, ok, err
}

// ImageChecker is an ImageSource that can tell cheaply, without building or
// unpacking anything, whether Ensure could supply an image now. The daemon
// asks before it requests a confirmation or uses an approval, so neither is
// wasted on a run that cannot start.
type ImageChecker interface {
	Available(name string) error
}

// Built reports whether image name is built in the store: nil, or an error
// wrapping images.ErrNotBuilt or images.ErrUnknownImage (or the store's own
// failure).
func (s *StoreImages) Built(name string) error {
	if _, ok, err := s.registryImage(name); ok {
		return err // pulled when first used
	}
	r, ok := s.Recipes[name]
	if !ok {
		return errkind.Errorf(images.ErrUnknownImage, "no recipe named %q: add images/recipes/%s.hcl or fix the image block in the config", name, name)
	}
	_, err := s.Store.Get(r.Name)
	return err
}

// Available implements ImageChecker: an image that is built, or that may be
// built on demand, is available; a missing one is errkind.Unavailable with the
// command that builds it.
func (s *StoreImages) Available(name string) error {
	if _, ok, err := s.registryImage(name); ok {
		return err
	}
	err := s.Built(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, images.ErrNotBuilt):
		if s.Build {
			return nil
		}
		return errkind.Errorf(errkind.Unavailable, "image %s is not built: run %s (or set images { build_on_demand = true } in the config to build it on first use, which takes minutes)", name, BuildCommand(s.Store.Dir(), s.Recipes[name].Name))
	case errors.Is(err, images.ErrUnknownImage):
		return errkind.Wrap(errkind.InvalidParams, err)
	default:
		return errkind.Errorf(errkind.Unavailable, "image store %s: %w", s.Store.Dir(), err)
	}
}

// BuildCommand is the command line that builds image name into the store at
// dir (the --dir flag only when dir is not the default).
func BuildCommand(dir, name string) string {
	if dir == "" || dir == images.DefaultDir {
		return "skillbox images build " + name
	}
	return "skillbox images build --dir " + dir + " " + name
}

// Ensure implements ImageSource.
func (s *StoreImages) Ensure(ctx context.Context, name string, progress io.Writer) (runtime.ImageRef, string, error) {
	if ref, ok, err := s.registryImage(name); ok {
		if err != nil {
			return runtime.ImageRef{}, "", err
		}
		d, err := s.Puller.EnsureImage(ctx, ref)
		if err != nil {
			return runtime.ImageRef{}, "", err
		}
		return runtime.ImageRef{Name: name, Digest: d, Ref: ref}, "", nil
	}
	r, ok := s.Recipes[name]
	if !ok {
		return runtime.ImageRef{}, "", errkind.Errorf(images.ErrUnknownImage, "no recipe named %q: add images/recipes/%s.hcl or fix the image block in the config", name, name)
	}
	img, rootfs, err := s.Store.Ensure(ctx, r, s.Build, progress)
	if err != nil {
		return runtime.ImageRef{}, "", err
	}
	return runtime.ImageRef{Name: img.Name, Digest: img.Digest, Layout: s.Store.LayoutDir()}, rootfs, nil
}
