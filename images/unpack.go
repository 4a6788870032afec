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
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/skillbox/skillbox/runtime/errkind"

	"github.com/hashicorp/go-hclog"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
)

// ErrUnsafeLayer is returned when a layer holds an entry that would land
// outside the rootfs (absolute path, "..", a path through a symlink, a hard
// link to outside). Such an image is refused whole, never partly unpacked.
var ErrUnsafeLayer = errors.New("unsafe layer entry")

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

	mp, err := s.blobPath(d)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(mp)
	if err != nil {
		return "", errkind.Errorf(ErrNotBuilt, "image %q: manifest %s is missing from %s; run: skillbox images build %s", img.Name, d, s.ociDir(), img.Name)
	}
	man, err := s.readManifest(v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d, Size: st.Size()})
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
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return "", err
	}
	defer root.Close()
	u := newUnpacker(root, s.asRoot, s.logger)
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
	p, err := s.blobPath(l.Digest)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("%w (rebuild the image)", err)
	}
	defer f.Close()
	compressed := l.Digest.Algorithm().Digester()
	src := io.TeeReader(f, compressed.Hash())
	var tarStream io.Reader
	switch l.MediaType {
	case v1.MediaTypeImageLayerGzip, "application/vnd.docker.image.rootfs.diff.tar.gzip":
		gz, err := gzip.NewReader(src)
		if err != nil {
			return err
		}
		defer gz.Close()
		tarStream = gz
	case v1.MediaTypeImageLayer:
		tarStream = src
	default:
		return fmt.Errorf("layer media type %q is not supported (gzip or plain tar only)", l.MediaType)
	}
	uncompressed := diffID.Algorithm().Digester()
	if err := u.unpack(ctx, io.TeeReader(tarStream, uncompressed.Hash())); err != nil {
		return err
	}
	// Hash what the tar reader did not need (end padding, gzip trailer).
	if _, err := io.Copy(io.Discard, io.TeeReader(tarStream, uncompressed.Hash())); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, src); err != nil {
		return err
	}
	if got := compressed.Digest(); got != l.Digest {
		return fmt.Errorf("blob is damaged: its digest is %s; rebuild the image", got)
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
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	u := newUnpacker(root, os.Geteuid() == 0, logger)
	if err := u.unpack(ctx, r); err != nil {
		return err
	}
	return u.finish()
}

// unpacker writes tar entries below an os.Root. os.Root already refuses any
// path that resolves outside the directory; on top of that the unpacker
// refuses entries whose parent path goes through a symlink at all, because a
// rootfs made by mmdebstrap never needs that and an image that does it is
// trying something.
type unpacker struct {
	root   *os.Root
	asRoot bool
	logger hclog.Logger
	// realDirs are paths known to be directories made by this unpack (not
	// symlinks), so parent checks rarely need a system call.
	realDirs map[string]bool
	// dirs get their mode, owner and times at the end, deepest first: a
	// read-only directory must not block its own entries, and writing
	// entries would bump its mtime.
	dirs []dirMeta
}

type dirMeta struct {
	name     string
	mode     fs.FileMode
	uid, gid int
	mtime    time.Time
	xattrs   map[string]string
}

func newUnpacker(root *os.Root, asRoot bool, logger hclog.Logger) *unpacker {
	return &unpacker{root: root, asRoot: asRoot, logger: logger, realDirs: map[string]bool{".": true}}
}

func (u *unpacker) unpack(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	for n := 0; ; n++ {
		if n%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return err
		}
	}
}

func unsafeErr(name, why string) error {
	return errkind.Errorf(ErrUnsafeLayer, "%q %s", name, why)
}

// entry writes one tar entry.
func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	name, err := layerName(hdr.Name)
	if err != nil {
		return err
	}
	if name == "" {
		return nil // the root itself: its mode is the store's to set
	}
	dir, base := path.Split(name)
	dir = path.Clean(dir)
	if err := u.ensureParent(dir, name); err != nil {
		return err
	}
	// Whiteouts delete what lower layers put there.
	if base == ".wh..wh..opq" {
		return u.clearDir(dir)
	}
	if victim, ok := strings.CutPrefix(base, ".wh."); ok {
		return u.remove(path.Join(dir, victim))
	}
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	xattrs := map[string]string{}
	for k, v := range hdr.PAXRecords {
		if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			xattrs[x] = v
		}
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		fi, err := u.root.Lstat(name)
		if err != nil || !fi.IsDir() {
			if err := u.remove(name); err != nil {
				return err
			}
			if err := u.root.Mkdir(name, 0o700); err != nil {
				return err
			}
		}
		u.realDirs[name] = true
		u.dirs = append(u.dirs, dirMeta{name, mode, hdr.Uid, hdr.Gid, hdr.ModTime, xattrs})
		return nil

	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old tars still use TypeRegA
		if err := u.remove(name); err != nil {
			return err
		}
		// O_EXCL: the name was just cleared, so this never follows a link.
		f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.CopyN(f, r, hdr.Size); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", name, err)
		}
		fd := int(f.Fd())
		err = u.ownAndMode(name, func(uid, gid int) error { return f.Chown(uid, gid) }, hdr.Uid, hdr.Gid,
			func() error { return f.Chmod(mode) })
		if err == nil {
			u.setXattrs(name, fd, xattrs)
			tv := unix.NsecToTimeval(hdr.ModTime.UnixNano())
			err = unix.Futimes(fd, []unix.Timeval{tv, tv})
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err

	case tar.TypeSymlink:
		if err := u.remove(name); err != nil {
			return err
		}
		// The target is stored as is: it is resolved inside the sandbox,
		// against the sandbox's root, never by this process.
		if err := u.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		if u.asRoot {
			if err := u.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
		return u.atParent(name, func(dirfd int, base string) error {
			ts := unix.NsecToTimespec(hdr.ModTime.UnixNano())
			return unix.UtimesNanoAt(dirfd, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
		})

	case tar.TypeLink:
		target, err := layerName(hdr.Linkname)
		if err != nil {
			return err
		}
		if target == "" {
			return unsafeErr(name, "is a hard link to the root directory")
		}
		if err := u.ensureParent(path.Dir(target), target); err != nil {
			return err
		}
		fi, err := u.root.Lstat(target)
		if err != nil {
			return unsafeErr(name, "is a hard link to "+hdr.Linkname+", which is not in the layer")
		}
		if fi.IsDir() {
			return unsafeErr(name, "is a hard link to a directory")
		}
		if target == name {
			return nil
		}
		if err := u.remove(name); err != nil {
			return err
		}
		return u.root.Link(target, name)

	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if !u.asRoot && hdr.Typeflag != tar.TypeFifo {
			// Only root may create device nodes; runtimes give sandboxes
			// their own /dev, so the rootfs works without them.
			u.logger.Debug("skipping device node: not root", "path", name)
			return nil
		}
		if err := u.remove(name); err != nil {
			return err
		}
		typ := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			typ = unix.S_IFCHR
		case tar.TypeBlock:
			typ = unix.S_IFBLK
		}
		return u.atParent(name, func(dirfd int, base string) error {
			dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
			if err := unix.Mknodat(dirfd, base, typ|0o600, int(dev)); err != nil {
				return fmt.Errorf("mknod %s: %w", name, err)
			}
			if u.asRoot {
				if err := unix.Fchownat(dirfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return err
				}
			}
			// Fchmodat follows links, but base was created as a node
			// just now in a directory only this process writes.
			if err := unix.Fchmodat(dirfd, base, unixMode(mode), 0); err != nil {
				return err
			}
			ts := unix.NsecToTimespec(hdr.ModTime.UnixNano())
			return unix.UtimesNanoAt(dirfd, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
		})

	case tar.TypeXGlobalHeader:
		return nil
	default:
		return fmt.Errorf("layer entry %s has unsupported type %q", name, hdr.Typeflag)
	}
}

// ensureParent makes sure every directory above name exists as a real
// directory, creating missing ones, and refuses the entry when one of them
// is a symlink or not a directory.
func (u *unpacker) ensureParent(dir, name string) error {
	if dir == "." || u.realDirs[dir] {
		return nil
	}
	if parent := path.Dir(dir); parent != "." && !u.realDirs[parent] {
		if err := u.ensureParent(parent, name); err != nil {
			return err
		}
	}
	fi, err := u.root.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := u.root.Mkdir(dir, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		return unsafeErr(name, "goes through the symlink "+dir)
	case !fi.IsDir():
		return unsafeErr(name, "goes through "+dir+", which is not a directory")
	}
	u.realDirs[dir] = true
	return nil
}

// remove deletes whatever is at name (nothing there is fine) and forgets
// any directories at or below it.
func (u *unpacker) remove(name string) error {
	if _, err := u.root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := u.root.RemoveAll(name); err != nil {
		return err
	}
	delete(u.realDirs, name)
	for d := range u.realDirs {
		if strings.HasPrefix(d, name+"/") {
			delete(u.realDirs, d)
		}
	}
	return nil
}

// clearDir empties dir (an opaque whiteout).
func (u *unpacker) clearDir(dir string) error {
	f, err := u.root.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := u.remove(path.Join(dir, n)); err != nil {
			return err
		}
	}
	return nil
}

// ownAndMode sets owner (as root only) then mode: chown clears set-id bits,
// so the mode must come second.
func (u *unpacker) ownAndMode(name string, chown func(uid, gid int) error, uid, gid int, chmod func() error) error {
	if u.asRoot {
		if err := chown(uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", name, err)
		}
	}
	if err := chmod(); err != nil {
		return fmt.Errorf("chmod %s: %w", name, err)
	}
	return nil
}

// setXattrs restores extended attributes (file capabilities live there).
// It runs after chown, which clears security.capability. A filesystem or
// user that cannot hold one is logged, not fatal: the image still runs.
func (u *unpacker) setXattrs(name string, fd int, xattrs map[string]string) {
	keys := make([]string, 0, len(xattrs))
	for k := range xattrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := unix.Fsetxattr(fd, k, []byte(xattrs[k]), 0); err != nil {
			u.logger.Warn("cannot restore extended attribute", "path", name, "xattr", k, "error", err)
		}
	}
}

// atParent runs fn with a descriptor of name's parent directory (opened
// through the Root, so confined) and name's last component, for the *at
// system calls os.Root has no method for.
func (u *unpacker) atParent(name string, fn func(dirfd int, base string) error) error {
	d, err := u.root.OpenFile(path.Dir(name), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return fn(int(d.Fd()), path.Base(name))
}

// finish applies directory metadata, deepest first.
func (u *unpacker) finish() error {
	sort.Slice(u.dirs, func(i, j int) bool { return u.dirs[i].name > u.dirs[j].name })
	for _, d := range u.dirs {
		fi, err := u.root.Lstat(d.name)
		if err != nil || !fi.IsDir() {
			continue // replaced by a later entry
		}
		if u.asRoot {
			if err := u.root.Lchown(d.name, d.uid, d.gid); err != nil {
				return err
			}
		}
		if len(d.xattrs) > 0 {
			if f, err := u.root.OpenFile(d.name, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err == nil {
				u.setXattrs(d.name, int(f.Fd()), d.xattrs)
				f.Close()
			}
		}
		if err := u.root.Chmod(d.name, d.mode); err != nil {
			return err
		}
		if err := u.root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// unixMode converts permission and set-id bits to the kernel's encoding.
func unixMode(m fs.FileMode) uint32 {
	out := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		out |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		out |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		out |= unix.S_ISVTX
	}
	return out
}
