// Package images builds interpreter images from recipes with Debian's own
// tooling (no registry needed), stores them as OCI image layouts addressed by
// digest, and keeps an unpacked read-only rootfs per digest for the runc and
// runsc backends.
package images

import "errors"

// Sentinel errors.
var (
	ErrNotBuilt     = errors.New("image not built")
	ErrUnknownImage = errors.New("unknown image")
	ErrBuildFailed  = errors.New("image build failed")
)
