package tarstream

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/skillbox/skillbox/runtime/oci"
)

// Unpack unpacks a sandbox's tar stream r (of its workdir) into dir, a
// private directory made for it, and returns what it did not unpack, as
// the local backends' collector names it ("path: why"). Names are
// confined to dir (os.Root: no "..", no link followed on the way);
// regular files become 0600 and directories 0700 whatever their modes
// (the collector reads content only); symlinks and hard links are made as
// such, never followed; fifos, devices and sparse files are named, never
// made. An error is a stream that broke or went over its bound (r is
// read through Bounded): what was unpacked until then stays, a file cut
// short removed.
func Unpack(r io.Reader, dir string) (skipped []string, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open outputs dir: %w", err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return skipped, nil
		}
		if err != nil {
			return skipped, err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if name == "." {
			continue
		}
		if name == ".." || strings.HasPrefix(name, "../") {
			skipped = append(skipped, oci.ReportName(h.Name)+": name outside the workdir, not collected")
			continue
		}
		skip := func(why string) { skipped = append(skipped, oci.ReportName(name)+": "+why) }
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				skip("cannot make directory: " + err.Error())
			}
		case tar.TypeReg:
			if SparseEntry(h) {
				// tar -c without --sparse makes none.
				skip(fmt.Sprintf("sparse file of %d bytes, not collected (write outputs as plain files)", h.Size))
				continue
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				skip("cannot create: " + err.Error())
				continue
			}
			_, cerr := io.Copy(f, tr)
			if err := errors.Join(cerr, f.Close()); err != nil {
				_ = root.Remove(name)
				if cerr != nil {
					return skipped, cerr
				}
				skip("cannot write: " + err.Error())
			}
		case tar.TypeSymlink:
			if err := root.Symlink(h.Linkname, name); err != nil {
				skip("symlink, not followed")
			}
		case tar.TypeLink:
			target := path.Clean(strings.TrimPrefix(h.Linkname, "/"))
			if err := root.Link(target, name); err != nil {
				skip("hard link to " + oci.ReportName(target) + " that cannot be made again, not collected: " + err.Error())
			}
		case tar.TypeFifo:
			skip("fifo, not collected")
		case tar.TypeChar:
			skip("character device, not collected")
		case tar.TypeBlock:
			skip("block device, not collected")
		default:
			skip(fmt.Sprintf("tar entry of type %q, not collected", h.Typeflag))
		}
	}
}
