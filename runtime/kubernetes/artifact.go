package kubernetes

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
)

// Artifacts: what a run mounts in the local backends (its skill snapshot,
// the skills and program of run_code, its dependency layer) reaches a node
// as part of the image the pod runs, since a node's containerd (1.6) has
// no image volumes and skillbox mounts nothing on a node. The derived
// image is the interpreter image's layers, then one layer of the skill
// files (at runtime.SkillMount, the skills under runtime.SkillsMount, the
// program in runtime.ProgramDir), then one of the dependency layer (at
// runtime.DepsMount). Its layers, config and manifest are written
// deterministically (uncompressed tars of sorted entries owned by root
// with a fixed time, JSON of fixed field order), so the same interpreter
// image, skill and dependency bytes always give the same manifest digest:
// the pod runs name@digest, which names exactly the approved bytes, and
// readOnlyRootFilesystem keeps them so.

// AnnotationBaseDigest is the derived manifest's annotation naming the
// interpreter image's manifest digest.
const AnnotationBaseDigest = "org.opencontainers.image.base.digest"

// layerTime is the time of every entry of a derived layer.
var layerTime = time.Unix(0, 0).UTC()

// whiteoutPrefix marks an OCI whiteout: such a name in a layer deletes a
// file below, so a skill or dependency file may not have it.
const whiteoutPrefix = ".wh."

// needsArtifact says whether job's files must travel in a derived image.
func needsArtifact(job runtime.Job) bool {
	return job.Sandbox.SkillDir != "" || job.Sandbox.DepsDir != "" || job.Sandbox.UsesSkillsDir()
}

// Artifacts builds derived images into one OCI layout, dir, which holds
// the blobs they add; the interpreter image's blobs stay in its own layout
// (Blobs finds both).
type Artifacts struct {
	dir string

	mu sync.Mutex
	// deps remembers the layer of each dependency layer directory of the
	// layer store (<layers>/sha256-<hex>/tree, immutable once made), so
	// that a large layer is tarred once per process.
	deps map[string]ocispec.Descriptor
	// agents remembers the agent image made per interpreter image
	// digest and binary path (agentimage.go), so that the binary is
	// tarred once per process.
	agents map[string]runtime.ImageRef
}

// NewArtifacts keeps derived images in the OCI layout dir (made if need be).
func NewArtifacts(dir string) *Artifacts {
	return &Artifacts{dir: dir, deps: map[string]ocispec.Descriptor{}}
}

// Dir is the OCI layout the derived images are in.
func (a *Artifacts) Dir() string { return a.dir }

// Build returns the derived image of job: its Name is the interpreter
// image's, its Digest the derived manifest's, its Layout a.Dir(). The
// interpreter image must be a skillbox image with an OCI layout (a
// registry image's blobs are not on this host).
func (a *Artifacts) Build(job runtime.Job) (runtime.ImageRef, error) {
	base := job.Sandbox.Image
	if base.Layout == "" || base.Ref != "" {
		return runtime.ImageRef{}, errkind.Errorf(runtime.ErrUnavailable, "run %s: image %q has no OCI layout on this host: the kubernetes runtime adds a skill or dependency layer only to images skillbox built (skillbox images build NAME)", job.Sandbox.ID, base.Name)
	}
	if job.Sandbox.Session != nil {
		return runtime.ImageRef{}, errkind.Errorf(runtime.ErrUnavailable, "run %s: sessions are not supported by the kubernetes runtime", job.Sandbox.ID)
	}
	if _, err := ImageReference(base); err != nil {
		return runtime.ImageRef{}, fmt.Errorf("run %s: %w", job.Sandbox.ID, err)
	}
	// The derived images hold the skills' files: the directory is root's
	// alone, as the local snapshots are (oci.MakePrivateDir: one found
	// open is closed, a link or another uid's is refused).
	if err := a.prepare(); err != nil {
		return runtime.ImageRef{}, errkind.Errorf(runtime.ErrUnavailable, "run %s: the kubernetes runtime builds the image of a run's skill files in %s, and cannot: %w", job.Sandbox.ID, a.dir, err)
	}
	var layers []ocispec.Descriptor
	if job.Sandbox.SkillDir != "" || job.Sandbox.UsesSkillsDir() {
		d, err := a.writeLayer(func(lw *layerWriter) error { return skillFiles(lw, job) })
		if err != nil {
			return runtime.ImageRef{}, fmt.Errorf("run %s: skill layer: %w", job.Sandbox.ID, err)
		}
		layers = append(layers, d)
	}
	if job.Sandbox.DepsDir != "" {
		d, err := a.depsLayer(job.Sandbox.DepsDir)
		if err != nil {
			return runtime.ImageRef{}, fmt.Errorf("run %s: dependency layer %s: %w", job.Sandbox.ID, job.Sandbox.DepsDir, err)
		}
		layers = append(layers, d)
	}
	return a.derive(base, layers, nil)
}

// derive writes the image that is base with layers on top (and the
// config changed by edit, if not nil), and returns it.
func (a *Artifacts) derive(base runtime.ImageRef, layers []ocispec.Descriptor, edit func(*ocispec.Image)) (runtime.ImageRef, error) {
	var m ocispec.Manifest
	if err := readBlobJSON(base.Layout, base.Digest, &m); err != nil {
		return runtime.ImageRef{}, fmt.Errorf("image %s: manifest: %w", base.Name, err)
	}
	var cfg ocispec.Image
	if err := readBlobJSON(base.Layout, m.Config.Digest.String(), &cfg); err != nil {
		return runtime.ImageRef{}, fmt.Errorf("image %s: config: %w", base.Name, err)
	}
	if edit != nil {
		edit(&cfg)
	}
	for _, d := range layers {
		// Uncompressed: a layer's diff id is its digest.
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, d.Digest)
	}
	cfgDesc, err := a.writeJSON(m.Config.MediaType, cfg)
	if err != nil {
		return runtime.ImageRef{}, err
	}
	derived := ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   m.MediaType,
		Config:      cfgDesc,
		Layers:      append(slices.Clip(m.Layers), layers...),
		Annotations: map[string]string{AnnotationBaseDigest: base.Digest},
	}
	if derived.MediaType == "" {
		derived.MediaType = ocispec.MediaTypeImageManifest
	}
	md, err := a.writeJSON(derived.MediaType, derived)
	if err != nil {
		return runtime.ImageRef{}, err
	}
	return runtime.ImageRef{Name: base.Name, Digest: md.Digest.String(), Layout: a.dir}, nil
}

// prepare makes the layout's directories, root's alone.
func (a *Artifacts) prepare() error {
	if err := oci.MakePrivateDir(a.dir, "the kubernetes runtime's artifacts dir"); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(a.dir, "blobs", "sha256"), 0o700)
}

// depsLayer is the layer of the dependency layer directory dir, at
// runtime.DepsMount.
func (a *Artifacts) depsLayer(dir string) (ocispec.Descriptor, error) {
	immutable := isLayerStoreDir(dir)
	if immutable {
		a.mu.Lock()
		d, ok := a.deps[dir]
		a.mu.Unlock()
		if ok {
			if _, err := os.Stat(blobPath(a.dir, d.Digest.String())); err == nil {
				return d, nil
			}
		}
	}
	d, err := a.writeLayer(func(lw *layerWriter) error { return lw.tree(dir, strings.TrimPrefix(runtime.DepsMount, "/")) })
	if err == nil && immutable {
		a.mu.Lock()
		a.deps[dir] = d
		a.mu.Unlock()
	}
	return d, err
}

// isLayerStoreDir: dir is <layers>/sha256-<hex>/tree, a directory of the
// dependency layer store, named by its digest.
func isLayerStoreDir(dir string) bool {
	h, ok := strings.CutPrefix(filepath.Base(filepath.Dir(dir)), "sha256-")
	if !ok || filepath.Base(dir) != "tree" || len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// skillFiles writes the skill files of job: SkillDir at SkillMount, each
// of Skills at its target (in the order of their targets), Program in
// ProgramDir.
func skillFiles(lw *layerWriter, job runtime.Job) error {
	if job.Sandbox.SkillDir != "" {
		if err := lw.tree(job.Sandbox.SkillDir, strings.TrimPrefix(runtime.SkillMount, "/")); err != nil {
			return err
		}
	}
	if !job.Sandbox.UsesSkillsDir() {
		return nil
	}
	if err := lw.dir(strings.TrimPrefix(runtime.SkillsMount, "/"), 0o755); err != nil {
		return err
	}
	skills := slices.Clone(job.Sandbox.Skills)
	slices.SortFunc(skills, func(x, y runtime.SkillBind) int { return strings.Compare(x.Target, y.Target) })
	if p := job.Sandbox.Program; p != nil {
		// ProgramDir sorts first: its name starts with '.'.
		if err := lw.dir(strings.TrimPrefix(runtime.ProgramDir, "/"), 0o555); err != nil {
			return err
		}
		if err := lw.file(strings.TrimPrefix(p.Path(), "/"), 0o444, p.Data); err != nil {
			return err
		}
	}
	for _, s := range skills {
		if err := lw.tree(s.Source, strings.TrimPrefix(s.Target, "/")); err != nil {
			return err
		}
	}
	return nil
}

// layerWriter writes one deterministic layer: entries owned by root, of
// time layerTime, in the order written, with permission bits only (no
// setuid, setgid or sticky bit, no write for group and others).
type layerWriter struct {
	tw *tar.Writer
}

func (lw *layerWriter) header(h *tar.Header) error {
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.ModTime, h.AccessTime, h.ChangeTime = layerTime, time.Time{}, time.Time{}
	h.Mode &= 0o755
	h.Format = tar.FormatPAX
	return lw.tw.WriteHeader(h)
}

func (lw *layerWriter) dir(name string, mode int64) error {
	return lw.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode})
}

func (lw *layerWriter) file(name string, mode int64, data []byte) error {
	if err := lw.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}); err != nil {
		return err
	}
	_, err := lw.tw.Write(data)
	return err
}

// tree writes the directory src as name (0755: what the run mounts
// there, it can enter) and everything under it, in lexical order, never
// following a symlink: directories, regular files (their bytes and
// permission bits) and symlinks (their target text, as a skill snapshot
// keeps them). Anything else, and a name the image would take for a whiteout,
// fails the layer: nothing of the tree is left out without a word.
func (lw *layerWriter) tree(src, name string) error {
	st, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", src)
	}
	if err := lw.dir(name, 0o755); err != nil {
		return err
	}
	return lw.walk(src, name)
}

func (lw *layerWriter) walk(src, name string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	// os.ReadDir sorts by name.
	for _, e := range entries {
		p, n := filepath.Join(src, e.Name()), name+"/"+e.Name()
		if strings.HasPrefix(e.Name(), whiteoutPrefix) {
			return fmt.Errorf("%s: a name starting with %q would delete files of the image (an OCI whiteout): rename it", p, whiteoutPrefix)
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		mode := int64(fi.Mode().Perm())
		switch {
		case fi.IsDir():
			if err := lw.dir(n, mode); err != nil {
				return err
			}
			if err := lw.walk(p, n); err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := lw.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: n, Linkname: target, Mode: 0o777}); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := lw.regular(p, n, mode); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s is a %s: only directories, regular files and symlinks can be part of an image layer", p, fi.Mode().Type())
		}
	}
	return nil
}

// regular copies the regular file p, refusing one that changed under it.
func (lw *layerWriter) regular(p, name string, mode int64) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s changed while it was read; try again", p)
	}
	if err := lw.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: st.Size()}); err != nil {
		return err
	}
	if _, err := io.CopyN(lw.tw, f, st.Size()); err != nil {
		return fmt.Errorf("%s changed while it was read: %w", p, err)
	}
	return nil
}

// writeLayer writes the layer fill makes as a blob of a.dir and returns
// its descriptor (an uncompressed OCI layer).
func (a *Artifacts) writeLayer(fill func(*layerWriter) error) (ocispec.Descriptor, error) {
	var desc ocispec.Descriptor
	err := a.writeBlob(func(w io.Writer) error {
		lw := &layerWriter{tw: tar.NewWriter(w)}
		if err := fill(lw); err != nil {
			return err
		}
		return lw.tw.Close()
	}, func(d digest.Digest, size int64) {
		desc = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: d, Size: size}
	})
	return desc, err
}

// writeJSON writes v as a blob of mediaType.
func (a *Artifacts) writeJSON(mediaType string, v any) (ocispec.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
	err = a.writeBlob(func(w io.Writer) error { _, err := w.Write(b); return err }, func(digest.Digest, int64) {})
	return desc, err
}

// writeBlob writes what write writes to a temporary file of a.dir, then
// moves it to its digest's name; done learns the digest and size.
func (a *Artifacts) writeBlob(write func(io.Writer) error, done func(digest.Digest, int64)) error {
	f, err := os.CreateTemp(filepath.Join(a.dir, "blobs", "sha256"), ".tmp-*")
	if err != nil {
		return fmt.Errorf("artifacts: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if err := write(cw); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("artifacts: %w", err)
	}
	d := digestFromHash(h)
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("artifacts: %w", err)
	}
	if err := os.Rename(f.Name(), blobPath(a.dir, d.String())); err != nil {
		return fmt.Errorf("artifacts: %w", err)
	}
	done(d, cw.n)
	return nil
}

func digestFromHash(h hash.Hash) digest.Digest {
	return digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(h.Sum(nil)))
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Blobs are the layouts that hold the blobs of img, a derived image of
// a (or an image of its own layout): a's first, then base's.
func (a *Artifacts) Blobs(img, base runtime.ImageRef) []string {
	if img.Layout == a.dir && base.Layout != "" && base.Layout != a.dir {
		return []string{a.dir, base.Layout}
	}
	return []string{img.Layout}
}

// readBlobJSON decodes the blob d of layout, checking its digest.
func readBlobJSON(layout, d string, v any) error {
	if !digestPattern.MatchString(d) {
		return fmt.Errorf("digest %q is not sha256", d)
	}
	b, err := os.ReadFile(blobPath(layout, d))
	if err != nil {
		return err
	}
	if got := digestOf(b); got != d {
		return fmt.Errorf("blob %s in %s does not match its digest (it is %s)", d, layout, got)
	}
	return json.Unmarshal(b, v)
}
