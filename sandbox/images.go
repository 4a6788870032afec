package sandbox

import (
	"context"
	"fmt"
	"io"

	"github.com/skillbox/skillbox/images"
)

// StoreImages supplies rootfs from the local image store, building an image
// from its recipe on first use when Build is set.
type StoreImages struct {
	Store   *images.Store
	Recipes map[string]*images.Recipe
	Build   bool
}

var _ ImageSource = (*StoreImages)(nil)

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
