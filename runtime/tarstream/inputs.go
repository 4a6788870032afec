package tarstream

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// WriteInputs writes a job's input entries to tw under prefix ("" or a
// relative directory ending in "/", "work/" for a stream unpacked at /):
// with their modes (0644 files and 0755 directories by default, as the
// local backends make them), owned by the container user, the
// directories their paths need first, and an empty outputs/ unless the
// inputs give one. It does not close tw. files must be valid
// (runtime.ValidateInputs).
func WriteInputs(tw *tar.Writer, prefix string, files []runtime.InputFile, now time.Time) error {
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Uid, h.Gid, h.Format = now, runtime.ContainerUID, runtime.ContainerGID, tar.FormatPAX
		return tw.WriteHeader(h)
	}
	made := map[string]bool{}
	dir := func(name string, mode uint32) error {
		made[name] = true
		return hdr(&tar.Header{Typeflag: tar.TypeDir, Name: prefix + name + "/", Mode: int64(mode)})
	}
	outputs := path.Base(runtime.OutputsDir)
	given := false
	for i := range files {
		f := &files[i]
		// The directories the path needs, unless made already.
		for j := strings.IndexByte(f.Name, '/'); j >= 0; {
			if parent := f.Name[:j]; !made[parent] {
				if err := dir(parent, 0o755); err != nil {
					return err
				}
			}
			next := strings.IndexByte(f.Name[j+1:], '/')
			if next < 0 {
				break
			}
			j += 1 + next
		}
		mode := f.Mode & 0o777
		var err error
		switch f.EffectiveKind() {
		case runtime.InputDir:
			if mode == 0 {
				mode = 0o755
			}
			given = given || f.Name == outputs
			err = dir(f.Name, mode)
		case runtime.InputSymlink:
			err = hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: prefix + f.Name, Linkname: f.Target, Mode: 0o777})
		default:
			if mode == 0 {
				mode = 0o644
			}
			if err = hdr(&tar.Header{Typeflag: tar.TypeReg, Name: prefix + f.Name, Mode: int64(mode), Size: int64(len(f.Data))}); err == nil {
				_, err = tw.Write(f.Data)
			}
		}
		if err != nil {
			return fmt.Errorf("input %s: %w", runtime.QuoteName(f.Name), err)
		}
	}
	if !given && !made[outputs] {
		if err := dir(outputs, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// WriteInputTar writes the whole tar stream of a job's input entries, as
// WriteInputs writes them with no prefix: the stream a workdir is made of.
func WriteInputTar(w io.Writer, files []runtime.InputFile, now time.Time) error {
	tw := tar.NewWriter(w)
	if err := WriteInputs(tw, "", files, now); err != nil {
		return err
	}
	return tw.Close()
}
