package service

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/sandbox/api"
)

// StoreImages supplies rootfs from the local image store, building an image
// from its recipe on first use when Build is set.
type StoreImages struct {
	Store   *images.Store
	Recipes map[string]*images.Recipe
	// Build lets Ensure build a missing image (minutes, inside the call that
	// needs it). Without it a missing image fails fast with api.ErrUnavailable,
	// naming the command that builds it.
	Build bool
}

var (
	_ ImageSource  = (*StoreImages)(nil)
	_ ImageChecker = (*StoreImages)(nil)
)

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
	r, ok := s.Recipes[name]
	if !ok {
		return fmt.Errorf("%w: no recipe named %q: add images/recipes/%s.hcl or fix the image block in the config", images.ErrUnknownImage, name, name)
	}
	_, err := s.Store.Get(r.Name)
	return err
}

// Available implements ImageChecker: an image that is built, or that may be
// built on demand, is available; a missing one is api.ErrUnavailable with the
// command that builds it.
func (s *StoreImages) Available(name string) error {
	err := s.Built(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, images.ErrNotBuilt):
		if s.Build {
			return nil
		}
		return fmt.Errorf("%w: image %s is not built: run %s (or set images { build_on_demand = true } in the config to build it on first use, which takes minutes)",
			api.ErrUnavailable, name, BuildCommand(s.Store.Dir(), s.Recipes[name].Name))
	case errors.Is(err, images.ErrUnknownImage):
		return fmt.Errorf("%w: %v", api.ErrInvalidParams, err)
	default:
		return fmt.Errorf("%w: image store %s: %v", api.ErrUnavailable, s.Store.Dir(), err)
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
func (s *StoreImages) Ensure(ctx context.Context, name string, progress io.Writer) (ImageRef, string, error) {
	r, ok := s.Recipes[name]
	if !ok {
		return ImageRef{}, "", fmt.Errorf("%w: no recipe named %q: add images/recipes/%s.hcl or fix the image block in the config", images.ErrUnknownImage, name, name)
	}
	img, rootfs, err := s.Store.Ensure(ctx, r, s.Build, progress)
	if err != nil {
		return ImageRef{}, "", err
	}
	return ImageRef{Name: img.Name, Digest: img.Digest}, rootfs, nil
}
