// Package images builds interpreter images from recipes with Debian's own
// tooling (no registry needed), stores them as OCI image layouts addressed by
// digest, and keeps an unpacked read-only rootfs per digest for the runc and
// runsc backends.
//
// Layers are unpacked with containerd's pkg/archive (Apply), already a
// dependency through the containerd backend, behind a reader that refuses
// unsafe entries before the library sees them; go-containerregistry would
// add a module tree and has no unpacker to disk. The layout itself (a few
// blobs, index.json) is written here: containerd's local content store
// probes fs-verity on every open, keeps its ingests inside the layout and
// makes blobs read-only, and go-containerregistry's layout rewrites
// index.json in place, which readers in other processes may see half
// written.
package images

import "errors"

// Sentinel errors.
var (
	ErrNotBuilt     = errors.New("image not built")
	ErrUnknownImage = errors.New("unknown image")
	ErrBuildFailed  = errors.New("image build failed")
)
