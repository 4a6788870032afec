package kubernetes

import (
	"fmt"
	"os"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// The agent's image. A pod whose data path is the agent runs skillbox's
// own binary as its container's process (`skillbox supervise --listen`),
// which is not in the interpreter image: the pod runs the interpreter
// image with one more layer, the binary at AgentPath. The interpreter's
// bytes are unchanged below it, and the derived image is written as
// deterministically as the skill layers (artifact.go), so one skillbox
// build and one interpreter image always give one digest: one pool per
// interpreter image, whatever the skill.

// AgentPath is where the agent's binary is in a pod.
const AgentPath = "/.skillbox/bin/skillbox"

// BuildAgent returns the image a pod runs the agent in: base, a skillbox
// image with an OCI layout, with the static skillbox binary at binary
// added at AgentPath.
func (a *Artifacts) BuildAgent(base runtime.ImageRef, binary string) (runtime.ImageRef, error) {
	if base.Layout == "" || base.Ref != "" {
		return runtime.ImageRef{}, errkind.Errorf(runtime.ErrUnavailable, "image %q has no OCI layout on this host: the kubernetes runtime adds its agent only to images skillbox built (skillbox images build NAME)", base.Name)
	}
	if _, err := ImageReference(base); err != nil {
		return runtime.ImageRef{}, err
	}
	key := base.Digest + "\x00" + binary
	a.mu.Lock()
	img, ok := a.agents[key]
	a.mu.Unlock()
	if ok {
		if _, err := os.Stat(blobPath(a.dir, img.Digest)); err == nil {
			return img, nil
		}
	}
	if err := a.prepare(); err != nil {
		return runtime.ImageRef{}, errkind.Errorf(runtime.ErrUnavailable, "the kubernetes runtime builds its agent's image in %s, and cannot: %w", a.dir, err)
	}
	if err := staticBinary(binary); err != nil {
		return runtime.ImageRef{}, err
	}
	layer, err := a.writeLayer(func(lw *layerWriter) error {
		dir := strings.TrimPrefix(AgentPath, "/")
		parts := strings.Split(dir, "/")
		for i := 1; i < len(parts); i++ {
			if err := lw.dir(strings.Join(parts[:i], "/"), 0o755); err != nil {
				return err
			}
		}
		return lw.regular(binary, dir, 0o755)
	})
	if err != nil {
		return runtime.ImageRef{}, fmt.Errorf("agent layer of %s: %w", binary, err)
	}
	img, err = a.derive(base, []ocispec.Descriptor{layer}, nil)
	if err != nil {
		return runtime.ImageRef{}, err
	}
	a.mu.Lock()
	if a.agents == nil {
		a.agents = map[string]runtime.ImageRef{}
	}
	a.agents[key] = img
	a.mu.Unlock()
	return img, nil
}

// staticBinary checks that p is an executable that needs no dynamic
// loader, so that it runs in any image.
func staticBinary(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return errkind.Errorf(runtime.ErrUnavailable, "the agent's binary: %w", err)
	}
	defer f.Close()
	interp, err := elfInterpreter(f)
	if err != nil {
		return errkind.Errorf(runtime.ErrUnavailable, "the agent's binary %s: %w", p, err)
	}
	if interp != "" {
		return errkind.Errorf(runtime.ErrUnavailable, "the agent's binary %s is linked dynamically (loader %s), and the pod's image may not have that loader: build skillbox with CGO_ENABLED=0 (make build does)", p, interp)
	}
	return nil
}

// AgentImages builds the agent's image of each of bases with binary into
// the OCI layout dir, as the daemon builds them (so with the same digests):
// what `skillbox images export --agent` writes for nodes that have no
// registry, beside the interpreter images their blobs are partly in.
func AgentImages(dir, binary string, bases ...runtime.ImageRef) ([]runtime.ImageRef, error) {
	a := NewArtifacts(dir)
	out := make([]runtime.ImageRef, 0, len(bases))
	for _, b := range bases {
		img, err := a.BuildAgent(b, binary)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}
