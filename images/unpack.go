package images

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/skillbox/skillbox/runtime/errkind"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/hashicorp/go-hclog"
	"github.com/moby/sys/userns"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
)

// ErrUnsafeLayer is returned when a layer holds an entry that would land
// outside the rootfs (absolute path, "..", a path through a symlink, a hard
// link to outside) or a sparse file, whose holes the unpack would write out
// in full. Such an image is refused whole, never partly unpacked.
var ErrUnsafeLayer = errors.New("unsafe layer entry")

// ErrLayerTooLarge is returned when a layer's files come to more than
// MaxLayerUnpackedBytes.
var ErrLayerTooLarge = errors.New("layer too large")

// MaxLayerUnpackedBytes bounds what one layer unpacks to: the sizes of its
// regular files, summed. The layers unpacked here are those of the images
// this store builds, one per image, from mmdebstrap's tree (the python
// image's comes to 1.7 GiB); dependency layers are directories the layer
// store writes, never unpacked from a tar, and the kubernetes backend
// leaves unpacking to the nodes' containerd. A gzip layer can grow about a
// thousandfold when unpacked and its digest is known only once it has been
// read, so a damaged or planted blob would otherwise fill the disk before
// it is found out. The bound is far above any image a recipe makes.
const MaxLayerUnpackedBytes = 32 << 30

// gnuSparseRecord prefixes the PAX records of GNU sparse files (formats
// 0.0, 0.1 and 1.0).
const gnuSparseRecord = "GNU.sparse."

// UnpackedRootFS returns the directory of img's root filesystem if it is
// unpacked already, without unpacking anything: for cheap looks at an
// image (which programs it has) that must not cost an unpack.
func (s *Store) UnpackedRootFS(img *Image) (string, bool) {
	d, err := digest.Parse(img.Digest)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return "", false
	}
	final := filepath.Join(s.rootfsDir(), "sha256-"+d.Encoded())
	return final, dirExists(final)
}

// RootFS returns the directory holding img's unpacked root filesystem,
// unpacking it first if this digest has not been unpacked before. The tree
// is shared by every sandbox that runs the image and must be mounted
// read-only; it is never modified after it appears. Unpacking goes to a
// temporary directory that is renamed into place, so a crash or a concurrent
// caller never sees half a tree.
func (s *Store) RootFS(ctx context.Context, img *Image) (string, error) {
	d, err := digest.Parse(img.Digest)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("image %q: bad digest %q", img.Name, img.Digest)
	}
	final := filepath.Join(s.rootfsDir(), "sha256-"+d.Encoded())
	if dirExists(final) {
		return final, nil
	}
	lock, err := acquireLock(ctx, s.lockPath("rootfs", d.Encoded()), s.logger)
	if errors.Is(err, fs.ErrPermission) {
		// An ordinary user running from the system's store (rootless):
		// it reads the unpacked trees, but only root unpacks them.
		return "", errkind.Errorf(ErrNotBuilt, "image %q is built but not unpacked in the image store %s, and this user may not unpack it there: run `sudo skillbox images build %s` once (it unpacks it), or use a store of your own with --images DIR: %v", img.Name, s.dir, img.Name, err)
	}
	if err != nil {
		return "", err
	}
	defer lock.release()
	if dirExists(final) { // another process finished while we waited
		return final, nil
	}
	// Leftovers of a crashed unpack of this digest: we hold its lock, so
	// nobody is using them.
	if old, _ := filepath.Glob(filepath.Join(s.rootfsDir(), ".tmp-sha256-"+d.Encoded()+"-*")); len(old) > 0 {
		for _, o := range old {
			removeTree(o)
		}
	}

	st, err := s.content.Info(s.contentCtx(ctx), d)
	if err != nil {
		return "", errkind.Errorf(ErrNotBuilt, "image %q: manifest %s is missing from %s; run: skillbox images build %s", img.Name, d, s.ociDir(), img.Name)
	}
	man, err := s.readManifest(v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d, Size: st.Size})
	if err != nil {
		return "", err
	}
	cb, err := s.readBlob(man.Config)
	if err != nil {
		return "", err
	}
	var cfg v1.Image
	if err := json.Unmarshal(cb, &cfg); err != nil {
		return "", fmt.Errorf("config %s: %w", man.Config.Digest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(man.Layers) {
		return "", fmt.Errorf("image %q: config lists %d layers, manifest %d; rebuild it", img.Name, len(cfg.RootFS.DiffIDs), len(man.Layers))
	}

	start := time.Now()
	tmp, err := os.MkdirTemp(s.rootfsDir(), ".tmp-sha256-"+d.Encoded()+"-")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			removeTree(tmp)
		}
	}()
	u, err := newUnpacker(tmp, s.asRoot, s.logger)
	if err != nil {
		return "", err
	}
	defer u.close()
	for i, l := range man.Layers {
		if err := s.unpackBlob(ctx, u, l, cfg.RootFS.DiffIDs[i]); err != nil {
			return "", fmt.Errorf("image %q: layer %s: %w", img.Name, l.Digest, err)
		}
	}
	if err := u.finish(); err != nil {
		return "", fmt.Errorf("image %q: %w", img.Name, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	ok = true
	s.logger.Info("rootfs unpacked", "image", img.Name, "digest", img.Digest, "path", final,
		"duration", time.Since(start).Round(time.Millisecond))
	return final, nil
}

// unpackBlob unpacks one layer blob, checking both its digest and its diffID
// as it streams: a damaged or swapped blob fails the unpack.
func (s *Store) unpackBlob(ctx context.Context, u *unpacker, l v1.Descriptor, diffID digest.Digest) error {
	ra, err := s.content.ReaderAt(s.contentCtx(ctx), l)
	if err != nil {
		return fmt.Errorf("%w (rebuild the image)", err)
	}
	defer ra.Close()
	compressed := l.Digest.Algorithm().Digester()
	src := io.TeeReader(content.NewReader(ra), compressed.Hash())
	// checkBlob reads the rest of the blob and says whether it is the one
	// its digest names. A damaged blob mostly fails gzip or tar first; it
	// is reported as damaged, not as whatever broke. A cancelled unpack
	// does not read on.
	checkBlob := func(failed error) error {
		if ctx.Err() != nil {
			return cmp.Or(failed, ctx.Err())
		}
		if _, err := io.Copy(io.Discard, src); err != nil {
			return errors.Join(failed, err)
		}
		if got := compressed.Digest(); got != l.Digest {
			return fmt.Errorf("blob %s is damaged: its digest is %s; rebuild the image", s.blobFile(l.Digest), got)
		}
		return failed
	}
	var tarStream io.Reader
	switch l.MediaType {
	case v1.MediaTypeImageLayerGzip, "application/vnd.docker.image.rootfs.diff.tar.gzip":
		gz, err := gzip.NewReader(src)
		if err != nil {
			return checkBlob(err)
		}
		defer gz.Close()
		tarStream = gz
	case v1.MediaTypeImageLayer:
		tarStream = src
	default:
		return fmt.Errorf("layer media type %q is not supported (gzip or plain tar only)", l.MediaType)
	}
	uncompressed := diffID.Algorithm().Digester()
	if err := u.apply(ctx, io.TeeReader(tarStream, uncompressed.Hash())); err != nil {
		return checkBlob(err)
	}
	// Hash what the tar reader did not need (end padding, gzip trailer).
	if _, err := io.Copy(io.Discard, io.TeeReader(tarStream, uncompressed.Hash())); err != nil {
		return checkBlob(err)
	}
	if err := checkBlob(nil); err != nil {
		return err
	}
	if got := uncompressed.Digest(); got != diffID {
		return fmt.Errorf("layer content digest %s differs from the config's %s; rebuild the image", got, diffID)
	}
	return nil
}

// UnpackTar unpacks the tar stream r into the empty directory dir with the
// same confinement rules as RootFS; it is what RootFS uses per layer, exposed
// for tools and tests that hold a plain tar.
func UnpackTar(ctx context.Context, r io.Reader, dir string, logger hclog.Logger) error {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	u, err := newUnpacker(dir, os.Geteuid() == 0, logger)
	if err != nil {
		return err
	}
	defer u.close()
	if err := u.apply(ctx, r); err != nil {
		return err
	}
	return u.finish()
}

// opaqueWhiteout is the entry that empties its directory.
const opaqueWhiteout = ".wh..wh..opq"

// xattrRecord prefixes the PAX records that hold extended attributes.
const xattrRecord = "SCHILY.xattr."

// unpacker applies layers to a directory with containerd's archive.Apply,
// which writes the entries (files, links, nodes, owners, modes, times) and
// resolves paths inside the directory. Apply reads the layer through a
// layerReader, which is stricter and refuses an unsafe entry before the
// library sees it. Around the library the unpacker keeps what suits an
// unprivileged unpack: owners are left alone and device nodes skipped when
// not root; extended attributes are set by the unpacker, a failure logged
// and not fatal; directories stay writable by their owner until finish gives
// each its mode and times, deepest first.
type unpacker struct {
	dir    string
	root   *os.Root // dir, for the unpacker's own look-ups and changes
	asRoot bool
	logger hclog.Logger
	// dirs is the last header's mode and time of every directory.
	dirs map[string]dirMeta
	// realDirs are paths known to be directories (not symlinks), so
	// parent checks rarely need a system call; anything that deletes
	// clears it.
	realDirs map[string]bool
	// pending holds the extended attributes of the entry Apply is writing;
	// they are set once it is written.
	pending *pendingXattrs
	// maxLayerBytes bounds the file sizes of one layer, summed.
	maxLayerBytes int64
}

type dirMeta struct {
	mode  fs.FileMode
	mtime time.Time
}

type pendingXattrs struct {
	name   string
	dir    bool
	xattrs map[string]string
}

func newUnpacker(dir string, asRoot bool, logger hclog.Logger) (*unpacker, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, err
	}
	return &unpacker{dir: abs, root: root, asRoot: asRoot, logger: logger,
		dirs: map[string]dirMeta{}, realDirs: map[string]bool{}, maxLayerBytes: MaxLayerUnpackedBytes}, nil
}

func (u *unpacker) close() error { return u.root.Close() }

// apply unpacks one layer, in as many Apply calls as the layerReader has
// segments.
func (u *unpacker) apply(ctx context.Context, r io.Reader) error {
	lr := &layerReader{u: u, ctx: ctx, tr: tar.NewReader(r)}
	var opts []archive.ApplyOpt
	if !u.asRoot {
		opts = append(opts, archive.WithNoSameOwner())
	}
	for !lr.end {
		lr.startSegment()
		if _, err := archive.Apply(ctx, u.dir, lr, opts...); err != nil {
			if lr.err != nil {
				return lr.err // what stopped Apply, unwrapped
			}
			return err
		}
	}
	return nil
}

// layerReader is the tar stream archive.Apply reads: the layer's entries
// rewritten by layerHeader and checked against the tree, or the error that
// refused one. Apply reads an entry's header only once it has written the
// entry before (its tar reader never reads ahead), so when the reader
// produces a header it sees the tree that entry lands in and can refuse an
// entry whose parent path goes through a symlink or a non-directory, or a
// hard link to something not in the tree or to a directory: a rootfs made by
// mmdebstrap never needs those, and an image that has them is trying
// something.
//
// Whiteouts are done by the reader itself, not passed on. Apply sets the
// times of the directories of a stream when the stream ends, so an entry
// that deletes what is there (a whiteout, a non-directory in place of a
// directory) ends the stream (a segment) first and starts the next one.
type layerReader struct {
	u   *unpacker
	ctx context.Context
	tr  *tar.Reader

	out     bytes.Buffer // bytes ready for Apply
	tw      *tar.Writer  // writes the segment into out
	body    int64        // bytes of the current entry still to copy
	held    *tar.Header  // the entry that starts the next segment
	files   int64        // the sizes of the layer's files passed on, summed
	entries int          // entries passed on in this segment
	headers int          // headers read, for cancellation checks
	closed  bool         // the segment's end is in out
	end     bool         // the layer has no more entries
	err     error        // what refused the layer
}

var _ io.Reader = (*layerReader)(nil)

func (l *layerReader) startSegment() {
	l.tw = tar.NewWriter(&l.out)
	l.entries, l.closed = 0, false
}

func (l *layerReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for l.out.Len() == 0 {
		if l.err != nil {
			return 0, l.err
		}
		if l.closed {
			return 0, io.EOF
		}
		if err := l.fill(len(p)); err != nil {
			l.err = err
			return 0, err
		}
	}
	return l.out.Read(p)
}

// fill puts the next bytes of the segment into out: up to max bytes of the
// current entry's body, or the next entry's header, or the segment's end.
func (l *layerReader) fill(max int) error {
	if l.body > 0 {
		n := min(int64(max), l.body)
		if _, err := io.CopyN(l.tw, l.tr, n); err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		l.body -= n
		return nil
	}
	// Apply has written every entry passed on so far.
	l.u.flushXattrs()
	for {
		hdr, err := l.next()
		if err != nil {
			return err
		}
		if hdr == nil {
			l.end = true
			return l.closeSegment()
		}
		if err := l.u.checkParents(hdr.Name, hdr.Name); err != nil {
			return err
		}
		whiteout := strings.HasPrefix(path.Base(hdr.Name), ".wh.")
		if whiteout || l.u.replacesDir(hdr) {
			clear(l.u.realDirs)
			if l.entries > 0 {
				l.held = hdr
				return l.closeSegment()
			}
		}
		if whiteout {
			if err := l.u.whiteout(hdr.Name); err != nil {
				return err
			}
			continue
		}
		pass, err := l.u.prepare(hdr)
		if err != nil {
			return err
		}
		if !pass {
			continue
		}
		if hdr.Typeflag == tar.TypeReg {
			if hdr.Size > l.u.maxLayerBytes-l.files {
				return errkind.Errorf(ErrLayerTooLarge, "layer entry %s, of %s, brings the layer's files past %s, the limit on what one layer unpacks to (images.MaxLayerUnpackedBytes); the layer is refused", hdr.Name, HumanSize(hdr.Size), HumanSize(l.u.maxLayerBytes))
			}
			l.files += hdr.Size
		}
		if err := l.tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("layer entry %s: %w", hdr.Name, err)
		}
		l.entries++
		if hdr.Typeflag == tar.TypeReg {
			l.body = hdr.Size
		}
		return nil
	}
}

// next returns the held entry or the next one of the layer that
// layerHeader passes, nil at the end.
func (l *layerReader) next() (*tar.Header, error) {
	if hdr := l.held; hdr != nil {
		l.held = nil
		return hdr, nil
	}
	for {
		if l.headers++; l.headers%256 == 0 && l.ctx.Err() != nil {
			return nil, l.ctx.Err()
		}
		hdr, err := l.tr.Next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read layer: %w", err)
		}
		out, err := l.u.layerHeader(hdr)
		if err != nil || out != nil {
			return out, err
		}
	}
}

func (l *layerReader) closeSegment() error {
	l.closed = true
	return l.tw.Close()
}

func unsafeErr(name, why string) error {
	return errkind.Errorf(ErrUnsafeLayer, "%q %s", name, why)
}

// layerHeader returns the header Apply gets for hdr: its name and hard-link
// target in clean relative form, its type, mode bits, owner, time and the
// extended attributes of files and directories, nothing else. It is nil for
// entries left out (the root itself, whose mode is the store's to set;
// global headers; device nodes when not root) and an error for entries
// refused, among them sparse files: archive/tar reads their holes as
// zeros, so a few bytes of layer would be written out as the file's whole
// length, and mmdebstrap makes none.
func (u *unpacker) layerHeader(hdr *tar.Header) (*tar.Header, error) {
	name, err := layerName(hdr.Name)
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, nil
	}
	if victim, ok := strings.CutPrefix(path.Base(name), ".wh."); ok && victim != opaqueWhiteout[len(".wh."):] &&
		(victim == "" || victim == "." || victim == "..") {
		return nil, unsafeErr(name, "is a whiteout that names no entry of its directory")
	}
	if sparseEntry(hdr) {
		return nil, unsafeErr(name, fmt.Sprintf("is a sparse file of %s (GNU sparse format), which a layer never holds: its holes would be written out in full", HumanSize(hdr.Size)))
	}
	out := &tar.Header{
		Name:    name,
		Mode:    hdr.Mode & 0o7777,
		Uid:     hdr.Uid,
		Gid:     hdr.Gid,
		ModTime: hdr.ModTime,
		Format:  tar.FormatPAX, // keeps sub-second times and large ids
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old tars still use TypeRegA
		out.Typeflag, out.Size = tar.TypeReg, hdr.Size
	case tar.TypeDir:
		out.Typeflag = tar.TypeDir
	case tar.TypeSymlink:
		// The target is kept as is: it is resolved inside the sandbox,
		// against the sandbox's root, never by this process.
		out.Typeflag, out.Linkname = tar.TypeSymlink, hdr.Linkname
	case tar.TypeLink:
		target, err := layerName(hdr.Linkname)
		if err != nil {
			return nil, err
		}
		if target == "" {
			return nil, unsafeErr(name, "is a hard link to the root directory")
		}
		out.Typeflag, out.Linkname = tar.TypeLink, target
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if hdr.Typeflag != tar.TypeFifo && (!u.asRoot || userns.RunningInUserNS()) {
			// Only root outside a user namespace may create device
			// nodes; runtimes give sandboxes their own /dev, so the
			// rootfs works without them.
			u.logger.Debug("skipping device node: not root", "path", name)
			return nil, nil
		}
		out.Typeflag, out.Devmajor, out.Devminor = hdr.Typeflag, hdr.Devmajor, hdr.Devminor
	case tar.TypeXGlobalHeader:
		return nil, nil
	default:
		return nil, fmt.Errorf("layer entry %s has unsupported type %q", name, hdr.Typeflag)
	}
	if out.Typeflag == tar.TypeReg || out.Typeflag == tar.TypeDir {
		for k, v := range hdr.PAXRecords {
			if strings.HasPrefix(k, xattrRecord) {
				if out.PAXRecords == nil {
					out.PAXRecords = map[string]string{}
				}
				out.PAXRecords[k] = v
			}
		}
	}
	return out, nil
}

// sparseEntry says whether hdr is a sparse file: the old GNU type 'S' or a
// PAX entry with GNU sparse records.
func sparseEntry(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, gnuSparseRecord) {
			return true
		}
	}
	return false
}

// checkParents refuses entry when a directory above p is a symlink or not a
// directory. Missing ones are fine: Apply creates them.
func (u *unpacker) checkParents(p, entry string) error {
	for i := 0; i < len(p); i++ {
		if p[i] != '/' || u.realDirs[p[:i]] {
			continue
		}
		dir := p[:i]
		fi, err := u.lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return unsafeErr(entry, "goes through the symlink "+dir)
		case !fi.IsDir():
			return unsafeErr(entry, "goes through "+dir+", which is not a directory")
		}
		u.realDirs[dir] = true
	}
	return nil
}

// lstat is Lstat of name below the directory, for a name whose parents
// checkParents passed: no symlink is followed on the way.
func (u *unpacker) lstat(name string) (fs.FileInfo, error) {
	return os.Lstat(filepath.Join(u.dir, filepath.FromSlash(name)))
}

// replacesDir says whether Apply deletes a directory to write hdr.
func (u *unpacker) replacesDir(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeDir {
		return false
	}
	fi, err := u.lstat(hdr.Name)
	return err == nil && fi.IsDir()
}

// whiteout does a whiteout entry: ".wh.NAME" deletes NAME, and the opaque
// marker empties its directory of everything unpacked so far.
func (u *unpacker) whiteout(name string) error {
	dir, base := path.Split(name)
	dir = path.Clean(dir)
	if base == opaqueWhiteout {
		return u.clearDir(dir)
	}
	return u.root.RemoveAll(path.Join(dir, strings.TrimPrefix(base, ".wh.")))
}

// clearDir empties dir (an opaque whiteout); a missing dir is empty.
func (u *unpacker) clearDir(dir string) error {
	f, err := u.root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := u.root.RemoveAll(path.Join(dir, n)); err != nil {
			return err
		}
	}
	return nil
}

// prepare checks an entry that is not a whiteout against the tree and
// readies hdr for Apply; false leaves the entry out.
func (u *unpacker) prepare(hdr *tar.Header) (bool, error) {
	switch hdr.Typeflag {
	case tar.TypeLink:
		target := hdr.Linkname
		if err := u.checkParents(target, hdr.Name); err != nil {
			return false, err
		}
		fi, err := u.lstat(target)
		if err != nil {
			return false, unsafeErr(hdr.Name, "is a hard link to "+target+", which is not in the layer")
		}
		if fi.IsDir() {
			return false, unsafeErr(hdr.Name, "is a hard link to a directory")
		}
		if target == hdr.Name {
			return false, nil
		}
		// A hard link shares its target's inode, whose owner, mode and
		// time are the target's: Apply sets those from the header, so
		// the header gets the target's.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Mode, hdr.Uid, hdr.Gid = int64(st.Mode&0o7777), int(st.Uid), int(st.Gid)
		}
		hdr.ModTime = fi.ModTime()
	case tar.TypeDir:
		u.realDirs[hdr.Name] = true // Apply makes or keeps it a directory
		u.dirs[hdr.Name] = dirMeta{hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), hdr.ModTime}
		if !u.asRoot {
			// A read-only directory must not block its own entries.
			hdr.Mode |= 0o700
		}
	}
	xattrs := map[string]string{}
	for k, v := range hdr.PAXRecords {
		if x, ok := strings.CutPrefix(k, xattrRecord); ok {
			xattrs[x] = v
			delete(hdr.PAXRecords, k)
		}
	}
	if len(xattrs) > 0 {
		u.pending = &pendingXattrs{name: hdr.Name, dir: hdr.Typeflag == tar.TypeDir, xattrs: xattrs}
	}
	return true, nil
}

// flushXattrs restores the extended attributes of the entry Apply wrote
// last (file capabilities live there). Apply has chowned it by now, which
// clears security.capability, so they are set after. A filesystem or user
// that cannot hold one is logged, not fatal: the image still runs.
func (u *unpacker) flushXattrs() {
	p := u.pending
	if p == nil {
		return
	}
	u.pending = nil
	flags := os.O_RDONLY | unix.O_NOFOLLOW
	if p.dir {
		flags |= unix.O_DIRECTORY
	}
	f, err := u.root.OpenFile(p.name, flags, 0)
	if err != nil {
		u.logger.Warn("cannot restore extended attributes", "path", p.name, "error", err)
		return
	}
	defer f.Close()
	keys := make([]string, 0, len(p.xattrs))
	for k := range p.xattrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := unix.Fsetxattr(int(f.Fd()), k, []byte(p.xattrs[k]), 0); err != nil {
			u.logger.Warn("cannot restore extended attribute", "path", p.name, "xattr", k, "error", err)
		}
	}
}

// finish applies directory modes and times, deepest first: entries written
// into a directory bump its mtime, and a later layer may write into one.
func (u *unpacker) finish() error {
	names := make([]string, 0, len(u.dirs))
	for n := range u.dirs {
		names = append(names, n)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, name := range names {
		d := u.dirs[name]
		fi, err := u.root.Lstat(name)
		if err != nil || !fi.IsDir() {
			continue // replaced or deleted by a later entry
		}
		if err := u.root.Chmod(name, d.mode); err != nil {
			return err
		}
		if err := u.root.Chtimes(name, d.mtime, d.mtime); err != nil {
			return err
		}
	}
	return nil
}
