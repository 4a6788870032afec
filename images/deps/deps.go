// Package deps is the per-skill dependency layers: it turns what a skill
// declares it needs (requirements.txt, PEP 723 blocks in its scripts,
// package.json, the config's packages block) into a dependency layer on top
// of an interpreter image: read-only, content-addressed by (image digest,
// normalised dependency set), shared by every skill with the same set, and
// built off the run path, so that a run never waits for a package index.
//
// Nothing a package ships runs on the host: Python artifacts are fetched as
// wheels only (pip download --only-binary, which unpacks nothing), npm
// packages are resolved with lifecycle scripts off and fetched as tarballs
// by skillbox itself; installation runs inside a sandbox of the image with
// the network off. Every artifact's sha256 is recorded in the layer's
// manifest. A layer is capped (dependencies.max_layer_bytes) before
// installing, while installing and after, and a build over the cap fails
// naming both sizes. Check is the static check behind skills.check.
package deps

import "errors"

// Sentinel errors.
var (
	// ErrInvalid: a dependency declaration cannot be parsed or is refused
	// (an option, a URL or a path where a package name belongs).
	ErrInvalid = errors.New("invalid dependency declaration")
	// ErrNoSource: dependencies are missing and no package source is configured.
	ErrNoSource = errors.New("no package source configured")
	// ErrRefused: an artifact would run code to install (an sdist, an npm
	// install script) and policy does not allow building from source.
	ErrRefused = errors.New("dependency refused")
	// ErrHash: an artifact does not match a hash its declaration pins.
	ErrHash = errors.New("dependency hash mismatch")
	// ErrBuild: fetching or installing the layer failed.
	ErrBuild = errors.New("dependency layer build failed")
	// ErrNotReady: the run's layer is not built (yet).
	ErrNotReady = errors.New("dependency layer not ready")
	// ErrTooLarge: the installed layer is over its size cap
	// (dependencies.max_layer_bytes).
	ErrTooLarge = errors.New("dependency layer too large")
)

// Ecosystems.
const (
	Python = "python"
	Npm    = "npm"
)
