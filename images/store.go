package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	clog "github.com/containerd/log"
	"github.com/hashicorp/go-hclog"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// DefaultDir is where the daemon and the CLI keep images unless told
// otherwise.
const DefaultDir = "/var/lib/skillbox/images"

// Image is one built image in the store.
type Image struct {
	// Name is the recipe name, also the OCI ref name in the layout.
	Name string
	// Digest is the manifest digest ("sha256:…"): the image's identity, what
	// the audit log records and what the rootfs cache is keyed by.
	Digest string
	// Size is the bytes the image takes in the OCI layout (compressed
	// layers, config and manifest).
	Size int64
	// UnpackedSize is the bytes of the uncompressed layers, about what the
	// rootfs takes on disk.
	UnpackedSize int64
	// Created is the image config's creation time, which is the build's
	// SOURCE_DATE_EPOCH (the Debian archive's Release date), not the wall
	// clock, so rebuilding the same recipe gives the same digest.
	Created time.Time
	// Built is when this store finished building the image (wall clock).
	Built time.Time
	// RecipeHash is Recipe.Hash of the recipe the image was built from.
	RecipeHash string
	// RecipeFile is where that recipe came from.
	RecipeFile string
	// Stale is true when the current recipe of that name hashes differently:
	// the image no longer matches its recipe and should be rebuilt.
	Stale bool
	// Interpreters are the commands the image provides (from its config).
	Interpreters []string
	// Env is the environment the image config declares.
	Env []string
	// Layers are the layer digests, bottom first.
	Layers []string
}

// Store keeps images as one OCI image layout plus unpacked rootfs trees:
//
//	<dir>/oci/                 OCI image layout: oci-layout, index.json, blobs/sha256/…
//	                           (and ingest/: blobs being written, see openContent)
//	<dir>/rootfs/sha256-<hex>/ read-only rootfs of the image with that manifest digest
//	<dir>/tmp/                 build and unpack scratch space (same filesystem, for renames)
//	<dir>/locks/               flock files: store.lock, build-<name>.lock, rootfs-<hex>.lock
//	<dir>/logs/                build-<name>.log: mmdebstrap's full output of the latest build
//
// Several processes may use one store at once: builds of one name are
// serialised by its build lock, index.json changes by the store lock, and
// every file that readers see appears by rename.
type Store struct {
	dir    string
	logger hclog.Logger
	// content holds the layout's blobs; clog is the logger its calls get.
	content content.Store
	clog    *clog.Entry

	mu      sync.Mutex
	recipes map[string]*Recipe

	// mmdebstrap is the command Build runs; tests may point it elsewhere.
	mmdebstrap string
	// asRoot says whether ownership and device nodes can be restored.
	asRoot bool
	// onBuild hears of every build (OnBuild).
	onBuild func(image string, err error)
}

// OpenStore opens (creating if needed) the store in dir. It starts with the
// default recipes for staleness checks; SetRecipes replaces them with the
// set the caller loaded (LoadRecipes with the user's directories).
func OpenStore(dir string, logger hclog.Logger) (*Store, error) {
	if dir == "" {
		dir = DefaultDir
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if !strings.HasSuffix(logger.Name(), "images") { // callers may have named it already
		logger = logger.Named("images")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:        abs,
		logger:     logger,
		mmdebstrap: "mmdebstrap",
		asRoot:     os.Geteuid() == 0,
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{s.dir, 0o755},
		{s.ociDir(), 0o755},
		{filepath.Join(s.ociDir(), "blobs", "sha256"), 0o755},
		{s.rootfsDir(), 0o755},
		// 0755: apt downloads as the unprivileged _apt user, which must
		// reach the chroot that mmdebstrap builds below tmp/.
		{s.tmpDir(), 0o755},
		{s.lockDir(), 0o700},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("open image store %s: %w (run as root or pass --dir to a writable directory)", abs, err)
		}
	}
	// The rootfs dirs must stay reachable (o+x on every component) though
	// not listable: runc, in a user namespace, mounts an image's rootfs
	// by path as the container's root, a uid of no one on the host. A
	// state dir made 0700 above the store breaks that with runc's bare
	// "permission denied", so say it here.
	if s.asRoot && !othersCanReach(s.rootfsDir()) {
		logger.Warn("the image rootfs directory cannot be reached by other uids: runc in a user namespace cannot mount an image's rootfs; give every directory above it o+x (e.g. chmod 0711)", "dir", s.rootfsDir())
	}
	if s.content, err = openContent(s.ociDir()); err != nil {
		return nil, fmt.Errorf("open image store %s: %w", abs, err)
	}
	s.clog = contentLogger(logger)
	layout := filepath.Join(s.ociDir(), v1.ImageLayoutFile)
	if _, err := os.Stat(layout); errors.Is(err, os.ErrNotExist) {
		b := []byte(`{"imageLayoutVersion":"` + v1.ImageLayoutVersion + `"}` + "\n")
		if err := writeFileAtomic(layout, b, 0o644); err != nil {
			return nil, fmt.Errorf("open image store %s: %w", abs, err)
		}
	}
	recipes, err := DefaultRecipes()
	if err != nil {
		return nil, err
	}
	s.recipes = recipes
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// LayoutDir is the store's OCI image layout, for tools that import images
// (the containerd backend, skopeo).
func (s *Store) LayoutDir() string { return s.ociDir() }

// SetRecipes sets the recipes staleness and "not built" errors refer to.
func (s *Store) SetRecipes(recipes map[string]*Recipe) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recipes = recipes
}

// Recipes returns the recipes the store knows.
func (s *Store) Recipes() map[string]*Recipe {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recipes
}

func (s *Store) rootfsDir() string { return filepath.Join(s.dir, "rootfs") }
func (s *Store) tmpDir() string    { return filepath.Join(s.dir, "tmp") }
func (s *Store) lockDir() string   { return filepath.Join(s.dir, "locks") }

func (s *Store) lockPath(kind, key string) string {
	return filepath.Join(s.lockDir(), kind+"-"+key+".lock")
}

// Get returns the built image called name. An image that was never built is
// ErrNotBuilt when a recipe of that name exists, ErrUnknownImage otherwise.
func (s *Store) Get(name string) (*Image, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	desc, ok := findRef(idx, name)
	recipes := s.Recipes()
	if !ok {
		if _, known := recipes[name]; known {
			return nil, errkind.Errorf(ErrNotBuilt, "image %q is not in %s; run: skillbox images build %s", name, s.dir, name)
		}
		return nil, errUnknown(name, recipes)
	}
	img, err := s.imageFromDescriptor(desc)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	s.markStale(img, recipes[name])
	return img, nil
}

// List returns every built image, sorted by name.
func (s *Store) List() ([]*Image, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	recipes := s.Recipes()
	var out []*Image
	for _, desc := range idx.Manifests {
		name := desc.Annotations[v1.AnnotationRefName]
		img, err := s.imageFromDescriptor(desc)
		if err != nil {
			// One damaged image must not hide the others (or stop the
			// daemon from listing them); Get on it reports the damage.
			s.logger.Warn("skipping damaged image; rebuild it", "image", name, "error", err)
			continue
		}
		s.markStale(img, recipes[name])
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// markStale sets img.Stale when r (the current recipe, if any) no longer
// hashes to what built the image. An image whose recipe is gone is not
// stale: there is nothing newer to build.
func (s *Store) markStale(img *Image, r *Recipe) {
	img.Stale = r != nil && r.Hash() != img.RecipeHash
}

// Ensure returns the image for r and its rootfs, ready to mount read-only.
// When the image is missing it is built first (progress to w) if build is
// true, and is ErrNotBuilt otherwise. A stale image is used as it is, with a
// warning: rebuilding takes minutes and is the operator's call.
func (s *Store) Ensure(ctx context.Context, r *Recipe, build bool, w io.Writer) (*Image, string, error) {
	img, err := s.getFor(r)
	if errors.Is(err, ErrNotBuilt) {
		if !build {
			return nil, "", err
		}
		img, err = s.build(ctx, r, BuildOptions{Progress: w, Unpack: true}, true)
		s.built(r.Name, err)
	}
	if err != nil {
		return nil, "", err
	}
	if img.Stale {
		s.logger.Warn("image is stale: its recipe changed since it was built", "image", r.Name,
			"digest", img.Digest, "fix", "skillbox images build "+r.Name)
	}
	root, err := s.RootFS(ctx, img)
	if err != nil {
		return nil, "", err
	}
	return img, root, nil
}

// getFor is Get for a recipe the caller holds, which may not be among the
// store's recipes; staleness is judged against r.
func (s *Store) getFor(r *Recipe) (*Image, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	desc, ok := findRef(idx, r.Name)
	if !ok {
		return nil, errkind.Errorf(ErrNotBuilt, "image %q is not in %s; run: skillbox images build %s", r.Name, s.dir, r.Name)
	}
	img, err := s.imageFromDescriptor(desc)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.Name, err)
	}
	s.markStale(img, r)
	return img, nil
}

// commit turns a rootfs tar into image r in the store: it writes the layer
// into the content store's ingest area (outside any lock, it is the slow
// part), then under the store lock commits the blobs and points the ref at
// the new manifest. Prune takes the same lock, so it never sees a committed
// blob that no ref names yet.
func (s *Store) commit(ctx context.Context, r *Recipe, rootfsTar io.Reader, epoch time.Time, history string) (*Image, error) {
	ctx = s.contentCtx(ctx)
	// A ref of its own: a build that dies leaves its ingest for Prune, not
	// for the next build to resume.
	ref := "skillbox-layer-" + r.Name + "-" + rand.Text()
	cw, err := s.content.Writer(ctx, content.WithRef(ref))
	if err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	committed := false
	defer func() {
		cw.Close()
		if !committed {
			s.content.Abort(context.WithoutCancel(ctx), ref)
		}
	}()
	layer, err := writeLayer(ctx, rootfsTar, cw, epoch)
	if err != nil {
		return nil, err
	}
	config, manifest, err := makeConfigAndManifest(imageMeta{
		name:         r.Name,
		recipeHash:   r.Hash(),
		interpreters: r.Interpreters,
		created:      epoch,
		history:      history,
	}, layer)
	if err != nil {
		return nil, err
	}

	lock, err := acquireLock(ctx, s.lockPath("store", "index"), s.logger)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	// A blob that is there already is the same bytes: content addressing.
	if err := cw.Commit(ctx, layer.size, layer.digest); err != nil && !errdefs.IsAlreadyExists(err) {
		return nil, fmt.Errorf("store layer %s: %w", layer.digest, err)
	}
	committed = true
	md := digest.FromBytes(manifest)
	for _, b := range []struct {
		mediaType string
		data      []byte
	}{{v1.MediaTypeImageConfig, config}, {v1.MediaTypeImageManifest, manifest}} {
		desc := v1.Descriptor{MediaType: b.mediaType, Digest: digest.FromBytes(b.data), Size: int64(len(b.data))}
		if err := content.WriteBlob(ctx, s.content, "skillbox-"+desc.Digest.Encoded(), bytes.NewReader(b.data), desc); err != nil {
			return nil, fmt.Errorf("store blob %s: %w", desc.Digest, err)
		}
	}
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	desc := v1.Descriptor{
		MediaType: v1.MediaTypeImageManifest,
		Digest:    md,
		Size:      int64(len(manifest)),
		Annotations: map[string]string{
			v1.AnnotationRefName: r.Name,
			AnnotationRecipeHash: r.Hash(),
			AnnotationRecipeFile: r.File,
			AnnotationBuilt:      time.Now().UTC().Format(time.RFC3339),
		},
		Platform: &v1.Platform{Architecture: ociArch(), OS: "linux"},
	}
	kept := idx.Manifests[:0]
	for _, d := range idx.Manifests {
		if d.Annotations[v1.AnnotationRefName] != r.Name {
			kept = append(kept, d)
		}
	}
	idx.Manifests = append(kept, desc)
	if err := s.writeIndex(idx); err != nil {
		return nil, err
	}
	img, err := s.imageFromDescriptor(desc)
	if err != nil {
		return nil, err
	}
	s.logger.Info("image stored", "image", r.Name, "digest", img.Digest, "size", img.Size, "layer", layer.digest)
	return img, nil
}

// Prune deletes what no image in index.json refers to any more: blobs of
// replaced builds, their rootfs trees and leftover scratch files. It is never
// run implicitly because a sandbox may still be running on an old rootfs;
// run it when no sandbox uses an image that was rebuilt. It returns the
// paths it removed.
func (s *Store) Prune(ctx context.Context) ([]string, error) {
	lock, err := acquireLock(ctx, s.lockPath("store", "index"), s.logger)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	keepBlobs := map[string]bool{}
	keepRootfs := map[string]bool{}
	for _, desc := range idx.Manifests {
		keepBlobs[desc.Digest.Encoded()] = true
		keepRootfs["sha256-"+desc.Digest.Encoded()] = true
		m, err := s.readManifest(desc)
		if err != nil {
			return nil, fmt.Errorf("prune: image %q: %w; fix or rebuild it first", desc.Annotations[v1.AnnotationRefName], err)
		}
		keepBlobs[m.Config.Digest.Encoded()] = true
		for _, l := range m.Layers {
			keepBlobs[l.Digest.Encoded()] = true
		}
	}
	// Listed here rather than with the content store's Walk, which sends
	// every name that is not a digest (a temporary file a crash left) to
	// containerd's process-wide logger and cannot delete it.
	var removed []string
	blobDir := filepath.Join(s.ociDir(), "blobs", string(digest.SHA256))
	entries, err := os.ReadDir(blobDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if keepBlobs[e.Name()] {
			continue
		}
		p := filepath.Join(blobDir, e.Name())
		if err := os.Remove(p); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	// Layers of builds that died half-way stay in the content store's
	// ingest area; one not written to for a day belongs to no running
	// build (see the scratch below).
	if err := s.walkIngests(s.contentCtx(ctx), func(st content.Status) error {
		if time.Since(st.UpdatedAt) < 24*time.Hour {
			return nil
		}
		if err := s.content.Abort(s.contentCtx(ctx), st.Ref); err != nil {
			return err
		}
		removed = append(removed, "unfinished blob "+st.Ref)
		return nil
	}); err != nil {
		return removed, err
	}
	entries, err = os.ReadDir(s.rootfsDir())
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		// Dot entries are unpacks in progress (or left by a crash, which
		// the next unpack of that digest clears).
		if keepRootfs[e.Name()] || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(s.rootfsDir(), e.Name())
		if err := removeTree(p); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	// Scratch older than a day belongs to no running build (the longest
	// build takes minutes); newer entries may.
	entries, err = os.ReadDir(s.tmpDir())
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < 24*time.Hour {
			continue
		}
		p := filepath.Join(s.tmpDir(), e.Name())
		if err := removeTree(p); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// walkIngests calls fn with the status of every blob being written (or
// left half-written) in the content store. Unlike the store's ListStatuses
// it passes over an ingest whose status cannot be read (a build that died
// before writing any data) instead of failing; containerd's own garbage
// collector walks them the same way.
func (s *Store) walkIngests(ctx context.Context, fn func(content.Status) error) error {
	w, ok := s.content.(interface {
		WalkStatusRefs(context.Context, func(string) error) error
	})
	if !ok {
		return nil
	}
	return w.WalkStatusRefs(ctx, func(ref string) error {
		st, err := s.content.Status(ctx, ref)
		if err != nil {
			return nil
		}
		return fn(st)
	})
}

// removeTree removes p and everything below it, first making directories
// writable so a read-only tree (an unpacked rootfs, when not root) goes too.
func removeTree(p string) error {
	if err := os.RemoveAll(p); err == nil {
		return nil
	}
	filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}
