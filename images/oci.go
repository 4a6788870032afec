package images

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/atomicfile"
	"github.com/containerd/containerd/v2/plugins/content/local"
	clog "github.com/containerd/log"
	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/gzip"
	"github.com/sirupsen/logrus"

	"github.com/skillbox/skillbox/runtime/errkind"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// Annotation and label keys skillbox adds. The OCI ones are used where the
// spec has a key for the meaning, so other tools (skopeo, ctr, umoci) show
// them too.
const (
	// AnnotationRecipeHash records Recipe.Hash of the recipe that built an
	// image, on the index entry, the manifest and as a config label.
	AnnotationRecipeHash = "io.skillbox.recipe.hash"
	// AnnotationRecipeFile is where that recipe came from (index entry only).
	AnnotationRecipeFile = "io.skillbox.recipe.file"
	// AnnotationBuilt is when this store finished the build (index entry
	// only, so it does not disturb the manifest digest).
	AnnotationBuilt = "io.skillbox.built"
	// AnnotationUnpackedSize is the byte count of a layer's uncompressed tar.
	AnnotationUnpackedSize = "io.skillbox.layer.unpacked-size"
	// LabelInterpreters lists the image's interpreters, comma separated, so
	// a runtime can match shebangs from the image alone.
	LabelInterpreters = "io.skillbox.image.interpreters"
	// LabelName is the recipe name the image was built from.
	LabelName = "io.skillbox.image.name"
)

// defaultEnv is the environment the image config declares; runtimes start
// from it. LANG=C.UTF-8 because the image keeps only the C.UTF-8 locale.
var defaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG=C.UTF-8",
}

// layerBlob is a gzip layer written to a content store writer, not yet
// committed.
type layerBlob struct {
	digest   digest.Digest // of the compressed bytes: the blob's name
	diffID   digest.Digest // of the uncompressed tar: the config's rootfs entry
	size     int64
	unpacked int64
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// writeLayer copies the rootfs tar from r into w as a gzip layer,
// normalising it so that equal file trees give equal bytes: names lose the
// "./" prefix, modification times are clamped to epoch and cut to seconds,
// access/change times, user and group names and every PAX record except
// extended attributes are dropped. The entry order is kept as mmdebstrap
// wrote it (sorted by name). The writer digests what it is given, so the
// layer is read and hashed once; committing it is the caller's.
func writeLayer(ctx context.Context, r io.Reader, w content.Writer, epoch time.Time) (*layerBlob, error) {
	gz, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	// A zero header (no name, no mtime) keeps the gzip bytes a function of
	// the tar bytes alone. klauspost/compress's gzip compresses the python
	// image's 1.7 GiB tar in half the time the standard library takes (on
	// two cores, 30 s less per build) for a layer about 4% larger.
	uncompressed := digest.SHA256.Digester()
	ucount := &countWriter{}
	tw := tar.NewWriter(io.MultiWriter(gz, uncompressed.Hash(), ucount))

	tr := tar.NewReader(r)
	for n := 0; ; n++ {
		if n%256 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read rootfs tar: %w", err)
		}
		out, err := normalizeHeader(hdr, epoch)
		if err != nil {
			return nil, err
		}
		if out == nil {
			continue
		}
		if err := tw.WriteHeader(out); err != nil {
			return nil, fmt.Errorf("write layer entry %s: %w", out.Name, err)
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return nil, fmt.Errorf("write layer entry %s: %w", out.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	st, err := w.Status()
	if err != nil {
		return nil, err
	}
	return &layerBlob{
		digest:   w.Digest(),
		diffID:   uncompressed.Digest(),
		size:     st.Offset,
		unpacked: ucount.n,
	}, nil
}

// normalizeHeader returns the header written to the layer for hdr, or nil
// for entries the layer leaves out (the root directory itself, global
// headers).
func normalizeHeader(hdr *tar.Header, epoch time.Time) (*tar.Header, error) {
	name, err := layerName(hdr.Name)
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, nil
	}
	out := &tar.Header{
		Name: name,
		Mode: hdr.Mode,
		Uid:  hdr.Uid,
		Gid:  hdr.Gid,
	}
	mtime := hdr.ModTime
	if mtime.After(epoch) {
		mtime = epoch
	}
	out.ModTime = mtime.Truncate(time.Second)
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old tars still use TypeRegA
		out.Typeflag = tar.TypeReg
		out.Size = hdr.Size
	case tar.TypeDir:
		out.Typeflag = tar.TypeDir
		out.Name += "/"
	case tar.TypeSymlink:
		out.Typeflag = tar.TypeSymlink
		out.Linkname = hdr.Linkname
	case tar.TypeLink:
		target, err := layerName(hdr.Linkname)
		if err != nil || target == "" {
			return nil, fmt.Errorf("rootfs tar: hard link %s to %q: target must be inside the tree", hdr.Name, hdr.Linkname)
		}
		out.Typeflag = tar.TypeLink
		out.Linkname = target
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		out.Typeflag = hdr.Typeflag
		out.Devmajor, out.Devminor = hdr.Devmajor, hdr.Devminor
	case tar.TypeXGlobalHeader:
		return nil, nil
	default:
		return nil, fmt.Errorf("rootfs tar: entry %s has unsupported type %q", hdr.Name, hdr.Typeflag)
	}
	for k, v := range hdr.PAXRecords {
		if strings.HasPrefix(k, "SCHILY.xattr.") {
			if out.PAXRecords == nil {
				out.PAXRecords = map[string]string{}
			}
			out.PAXRecords[k] = v
		}
	}
	return out, nil
}

// layerName turns a tar entry name into the clean relative form used in
// layers ("usr/bin/bash"); "" is the root itself. Absolute names and ".."
// components are refused rather than repaired: a tar that has them was not
// made by mmdebstrap or this package.
func layerName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", errkind.Errorf(ErrUnsafeLayer, "entry %q has an absolute path", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", errkind.Errorf(ErrUnsafeLayer, "entry %q climbs out with '..'", name)
		}
	}
	clean := path.Clean("/" + name)[1:]
	return clean, nil
}

// ociArch is the OCI architecture of the images mmdebstrap builds here: the
// host's, which Go names the same way for the usual Debian ports.
func ociArch() string { return goruntime.GOARCH }

// imageMeta is what a build knows about the image beyond its layer.
type imageMeta struct {
	name         string
	recipeHash   string
	interpreters []string
	created      time.Time // SOURCE_DATE_EPOCH
	history      string    // how the layer was made, for `created_by`
}

// makeConfigAndManifest returns the config and manifest JSON for a
// single-layer image. Both are plain json.Marshal output of image-spec types
// (struct fields in declaration order, map keys sorted), so they are stable.
func makeConfigAndManifest(m imageMeta, layer *layerBlob) (config, manifest []byte, err error) {
	created := m.created.UTC()
	cfg := v1.Image{
		Created:  &created,
		Platform: v1.Platform{Architecture: ociArch(), OS: "linux"},
		Config: v1.ImageConfig{
			Env:        defaultEnv,
			WorkingDir: "/",
			Labels: map[string]string{
				LabelName:            m.name,
				LabelInterpreters:    strings.Join(m.interpreters, ","),
				AnnotationRecipeHash: m.recipeHash,
			},
		},
		RootFS: v1.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.diffID}},
		History: []v1.History{{
			Created:   &created,
			CreatedBy: m.history,
			Comment:   "skillbox image " + m.name,
		}},
	}
	if config, err = json.Marshal(cfg); err != nil {
		return nil, nil, err
	}
	man := v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageManifest,
		Config: v1.Descriptor{
			MediaType: v1.MediaTypeImageConfig,
			Digest:    digest.FromBytes(config),
			Size:      int64(len(config)),
		},
		Layers: []v1.Descriptor{{
			MediaType:   v1.MediaTypeImageLayerGzip,
			Digest:      layer.digest,
			Size:        layer.size,
			Annotations: map[string]string{AnnotationUnpackedSize: strconv.FormatInt(layer.unpacked, 10)},
		}},
		Annotations: map[string]string{
			v1.AnnotationCreated: created.Format(time.RFC3339),
			v1.AnnotationTitle:   m.name,
			AnnotationRecipeHash: m.recipeHash,
		},
	}
	if manifest, err = json.Marshal(man); err != nil {
		return nil, nil, err
	}
	return config, manifest, nil
}

// ociDir is the store's one OCI image layout; every image is a ref in it, so
// `skopeo copy oci:<dir>/oci:python …` and friends work on it as is.
func (s *Store) ociDir() string { return filepath.Join(s.dir, "oci") }

// openContent opens the layout's blobs as a containerd local content store,
// whose blob tree (<root>/blobs/sha256/<hex>) is the layout's own. It writes
// a blob into <root>/ingest/ first and renames it into place, read-only,
// once its size and digest are checked, so readers only ever see whole
// blobs. The layout's readers (rootfs unpack, the containerd and Kubernetes
// imports, skopeo) open blobs by digest and never look at ingest/.
func openContent(root string) (content.Store, error) {
	quietFsverityProbe()
	return local.NewStore(root)
}

// quietFsverityProbe keeps one message of containerd's local content store
// off the terminal: opening a store probes its filesystem for fs-verity and
// reports a filesystem without it (nearly all) as a warning through
// containerd's process-wide logger, not the context's, where a CLI command
// would print it among its progress lines. Where the filesystem has
// fs-verity the store turns it on for every blob it commits; where it has
// not, nothing is missing: blobs are checked against their digests when read.
var quietFsverityProbe = sync.OnceFunc(func() {
	l := clog.L.Logger
	l.SetFormatter(dropFormatter{next: l.Formatter, msg: "failed check for fsverity support"})
})

// dropFormatter formats entries as next does, except those whose message is
// msg, which it turns into nothing; with no next it turns every entry into
// nothing.
type dropFormatter struct {
	next logrus.Formatter
	msg  string
}

func (f dropFormatter) Format(e *logrus.Entry) ([]byte, error) {
	if f.next == nil || e.Message == f.msg {
		return nil, nil
	}
	return f.next.Format(e)
}

// contentLogger is the logger the content store gets through its context:
// what it says goes to logger at debug level, never to stderr. Everything it
// reports there is housekeeping (an ingest directory left behind, a time
// not set); what fails an operation comes back as its error.
func contentLogger(logger hclog.Logger) *clog.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetFormatter(dropFormatter{}) // nothing is written, so nothing need be formatted
	l.SetLevel(logrus.DebugLevel)
	l.AddHook(hclogHook{logger})
	return logrus.NewEntry(l)
}

type hclogHook struct{ l hclog.Logger }

func (hclogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h hclogHook) Fire(e *logrus.Entry) error {
	args := []any{"containerd_level", e.Level.String()}
	for k, v := range e.Data {
		args = append(args, k, v)
	}
	h.l.Debug("content store: "+e.Message, args...)
	return nil
}

// contentCtx is ctx for a content store call: it carries contentLogger.
func (s *Store) contentCtx(ctx context.Context) context.Context {
	return clog.WithLogger(ctx, s.clog)
}

// blobFile is where the blob d lies, for messages that must name the file.
func (s *Store) blobFile(d digest.Digest) string {
	return filepath.Join(s.ociDir(), "blobs", d.Algorithm().String(), d.Encoded())
}

// readBlob reads the manifest or config desc names and checks its size and
// digest, so a damaged store is reported rather than used.
func (s *Store) readBlob(desc v1.Descriptor) ([]byte, error) {
	const maxMeta = 4 << 20 // manifests and configs are small
	if desc.Size < 0 || desc.Size > maxMeta {
		return nil, fmt.Errorf("blob %s: size %d is not that of a manifest or config", desc.Digest, desc.Size)
	}
	ctx := s.contentCtx(context.Background())
	// Info validates the digest (it names a file below blobs/) and gives the
	// size before anything is read.
	info, err := s.content.Info(ctx, desc.Digest)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	var b []byte
	if info.Size == desc.Size {
		if b, err = content.ReadBlob(ctx, s.content, desc); err != nil {
			return nil, fmt.Errorf("blob %s: %w", desc.Digest, err)
		}
	}
	if int64(len(b)) != desc.Size || desc.Digest.Algorithm().FromBytes(b) != desc.Digest {
		return nil, fmt.Errorf("blob %s is damaged (size or digest differs): %s; rebuild the image", desc.Digest, s.blobFile(desc.Digest))
	}
	return b, nil
}

// readIndex reads index.json; a store without one has no images yet. The
// index is the layout's one mutable file, outside the content store.
func (s *Store) readIndex() (*v1.Index, error) {
	p := filepath.Join(s.ociDir(), v1.ImageIndexFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return &v1.Index{
			Versioned: specs.Versioned{SchemaVersion: 2},
			MediaType: v1.MediaTypeImageIndex,
			Manifests: []v1.Descriptor{},
		}, nil
	}
	if err != nil {
		return nil, err
	}
	var idx v1.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &idx, nil
}

// writeIndex replaces index.json atomically, entries sorted by ref name so
// the file is stable. Callers hold the store lock.
func (s *Store) writeIndex(idx *v1.Index) error {
	sort.Slice(idx.Manifests, func(i, j int) bool {
		return idx.Manifests[i].Annotations[v1.AnnotationRefName] < idx.Manifests[j].Annotations[v1.AnnotationRefName]
	})
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.ociDir(), v1.ImageIndexFile), append(b, '\n'), 0o644)
}

// writeFileAtomic writes b to a temporary file beside p, syncs it and renames
// it over p, so readers see the old or the new content, never a mix.
func writeFileAtomic(p string, b []byte, mode os.FileMode) error {
	f, err := atomicfile.New(p, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Cancel()
		return err
	}
	return f.Close()
}

// findRef returns the index entry whose ref name is name.
func findRef(idx *v1.Index, name string) (v1.Descriptor, bool) {
	for _, d := range idx.Manifests {
		if d.Annotations[v1.AnnotationRefName] == name {
			return d, true
		}
	}
	return v1.Descriptor{}, false
}

// readManifest reads and decodes the manifest desc names.
func (s *Store) readManifest(desc v1.Descriptor) (*v1.Manifest, error) {
	if desc.MediaType != v1.MediaTypeImageManifest {
		return nil, fmt.Errorf("manifest %s has media type %q; only single-platform OCI manifests are supported", desc.Digest, desc.MediaType)
	}
	b, err := s.readBlob(desc)
	if err != nil {
		return nil, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	return &m, nil
}

// imageFromDescriptor loads the Image an index entry describes.
func (s *Store) imageFromDescriptor(desc v1.Descriptor) (*Image, error) {
	m, err := s.readManifest(desc)
	if err != nil {
		return nil, err
	}
	cb, err := s.readBlob(m.Config)
	if err != nil {
		return nil, err
	}
	var cfg v1.Image
	if err := json.Unmarshal(cb, &cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	img := &Image{
		Name:       desc.Annotations[v1.AnnotationRefName],
		Digest:     desc.Digest.String(),
		Size:       desc.Size + m.Config.Size,
		RecipeHash: desc.Annotations[AnnotationRecipeHash],
		RecipeFile: desc.Annotations[AnnotationRecipeFile],
		Env:        cfg.Config.Env,
	}
	if cfg.Created != nil {
		img.Created = *cfg.Created
	}
	if t, err := time.Parse(time.RFC3339, desc.Annotations[AnnotationBuilt]); err == nil {
		img.Built = t
	}
	if v := cfg.Config.Labels[LabelInterpreters]; v != "" {
		img.Interpreters = strings.Split(v, ",")
	}
	for _, l := range m.Layers {
		img.Size += l.Size
		img.Layers = append(img.Layers, l.Digest.String())
		if n, err := strconv.ParseInt(l.Annotations[AnnotationUnpackedSize], 10, 64); err == nil {
			img.UnpackedSize += n
		}
	}
	return img, nil
}
