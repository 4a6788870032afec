// Package checkpoint keeps the checkpoints of session sandboxes:
// where they live on disk and what vouches for them.
//
// A checkpoint is a gVisor memory image (runsc checkpoint's
// checkpoint.img, pages.img, pages_meta.img) and a copy of the sandbox's
// /work, which runsc does not save but the restored processes hold open.
// The image holds all of the sandbox's memory, secrets included, and runsc
// writes it world-readable, so the Store keeps it in a directory only its
// owner may enter. runsc checks nothing at restore but its own version: its
// header is unauthenticated and the image (rootfs) is not compared. So each
// checkpoint carries skillbox's own Manifest, with the sha256 of every file
// and what the sandbox was made of, and Load and Verify check it before
// runsc is called.
//
// The package imports only runtime/errkind, x/sys/unix and the standard
// library, so the runtime and the service can both use it.
package checkpoint

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Error kinds of the package, for errors.Is. The service maps them to its
// own kinds (the package knows no API).
var (
	// ErrNotFound: no checkpoint with that id.
	ErrNotFound = errors.New("checkpoint not found")
	// ErrCorrupt: a checkpoint whose files are not what its manifest
	// says, or one runsc failed to write.
	ErrCorrupt = errors.New("checkpoint damaged")
	// ErrBudgetExceeded: the checkpoint would pass one of the store's
	// budgets (sessions.checkpoint_budget, its per-session and per-uid
	// parts, its share of the disk, or the audit's min_free).
	ErrBudgetExceeded = errors.New("checkpoint budget exceeded")
	// ErrMismatch: a sound checkpoint made by another runsc, image, spec
	// or skill set than the restore would use (see MismatchError).
	ErrMismatch = errors.New("checkpoint does not match")
	// ErrUnsafeDir: the store's directory is open to other users or not
	// this process's.
	ErrUnsafeDir = errors.New("unsafe checkpoint directory")
)

// Format is the manifest format this package writes and reads.
const Format = 1

// ManifestName is the manifest's file in a checkpoint's directory.
const ManifestName = "manifest.json"

// maxManifestBytes bounds a manifest read from disk (a workspace copy of
// many small files makes a long one).
const maxManifestBytes = 64 << 20

// File types in a manifest.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeFIFO    = "fifo"
)

// Manifest says what a checkpoint is made of and from what. It is written
// as manifest.json beside the files, and its digest goes to the audit log.
type Manifest struct {
	Format int `json:"format"`
	// ID is the checkpoint's ("ck-" and 24 hex digits), given by the Store.
	ID string `json:"id"`
	// Session is the session whose sandbox was checkpointed.
	Session string `json:"session"`
	// UID is the session owner's uid, whose budget the checkpoint is
	// charged to (absent: charged to no uid's).
	UID *uint32 `json:"uid,omitempty"`
	// Parent is the checkpoint a fork was restored from, or "".
	Parent  string    `json:"parent"`
	Created time.Time `json:"created"`
	// RunscVersion is `runsc --version`'s release of the binary that made
	// the image; gVisor restores only with the same one.
	RunscVersion string `json:"runsc_version"`
	// Platform is runsc's --platform (systrap, ptrace, kvm).
	Platform string `json:"platform"`
	// Network is runsc's --network mode the sandbox ran with.
	Network string `json:"network"`
	// Image and ImageDigest name the image the sandbox's rootfs is.
	Image       string `json:"image"`
	ImageDigest string `json:"image_digest"`
	// SpecDigest is the caller's digest of the OCI spec without what may
	// differ at restore (mount sources, run-dir paths, resources).
	SpecDigest string `json:"spec_digest"`
	// SkillDigests are the mounted skills' digests by name.
	SkillDigests map[string]string `json:"skill_digests"`
	// Owner holds what the caller keeps about the checkpointed sandbox to
	// make it again (its limits, mounts, background runs), opaque here
	// and covered by the digest.
	Owner map[string]string `json:"owner,omitempty"`
	// Files are every entry of the checkpoint's directory but the
	// manifest, sorted by path; TotalBytes the sum of their sizes.
	Files      []File `json:"files"`
	TotalBytes int64  `json:"total_bytes"`
	// DiskBytes is TotalBytes with a file of several names (hard links)
	// counted once: what the store charges for the files (0 in a
	// manifest written before it was kept: TotalBytes then).
	DiskBytes int64 `json:"disk_bytes,omitempty"`
}

// File is one entry of a checkpoint's directory.
type File struct {
	// Path is relative to the checkpoint's directory, "/"-separated
	// ("image/pages.img", "work/out/report.csv").
	Path string `json:"path"`
	Type string `json:"type"` // TypeFile, TypeDir, TypeSymlink or TypeFIFO
	// Size is a file's length, a symlink's target's; 0 otherwise.
	Size int64 `json:"size"`
	// Mode is the permission bits (with setuid, setgid, sticky).
	Mode uint32 `json:"mode"`
	// SHA256 is the hex digest of a file's contents or a symlink's
	// target; "" for a directory or fifo.
	SHA256 string `json:"sha256,omitempty"`
}

var (
	idRE  = regexp.MustCompile(`^ck-[0-9a-f]{24}$`)
	hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidID reports whether id has the form the Store gives ids.
func ValidID(id string) bool { return idRE.MatchString(id) }

// ParseManifest decodes and checks a manifest: the format, the id, and
// every file entry (a clean relative path inside the checkpoint, once; a
// known type; a digest where one belongs), and the total. Unknown fields
// are refused: a manifest is only ever written by this package.
func ParseManifest(data []byte) (*Manifest, error) {
	if len(data) > maxManifestBytes {
		return nil, errkind.Errorf(ErrCorrupt, "manifest is %d bytes, more than the %d a checkpoint's manifest may have", len(data), maxManifestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, errkind.Errorf(ErrCorrupt, "decode manifest: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errkind.Errorf(ErrCorrupt, "decode manifest: data after the manifest object")
	}
	if err := m.check(); err != nil {
		return nil, errkind.Errorf(ErrCorrupt, "manifest of %s: %w", orUnknown(m.ID), err)
	}
	return &m, nil
}

func orUnknown(id string) string {
	if id == "" {
		return "an unknown checkpoint"
	}
	return id
}

// check is ParseManifest's validation of a decoded manifest.
func (m *Manifest) check() error {
	if m.Format != Format {
		return fmt.Errorf("format %d, but this skillbox reads format %d: remove the checkpoint", m.Format, Format)
	}
	if !ValidID(m.ID) {
		return fmt.Errorf("invalid id %q", m.ID)
	}
	if m.Parent != "" && !ValidID(m.Parent) {
		return fmt.Errorf("invalid parent %q", m.Parent)
	}
	seen := make(map[string]bool, len(m.Files))
	var total int64
	for i, f := range m.Files {
		if err := f.check(); err != nil {
			return fmt.Errorf("file %d: %w", i+1, err)
		}
		if seen[f.Path] {
			return fmt.Errorf("file %q listed twice", f.Path)
		}
		if i > 0 && m.Files[i-1].Path > f.Path {
			return fmt.Errorf("files not sorted by path at %q", f.Path)
		}
		if dir := path.Dir(f.Path); dir != "." && !seen[dir] {
			return fmt.Errorf("file %q listed before its directory %q", f.Path, dir)
		}
		seen[f.Path] = true
		if total += f.Size; total < 0 {
			return fmt.Errorf("total size overflows")
		}
	}
	if total != m.TotalBytes {
		return fmt.Errorf("total_bytes is %d, but its files add up to %d", m.TotalBytes, total)
	}
	if m.DiskBytes < 0 || m.DiskBytes > m.TotalBytes {
		return fmt.Errorf("disk_bytes is %d, outside 0 to total_bytes (%d)", m.DiskBytes, m.TotalBytes)
	}
	return nil
}

func (f *File) check() error {
	if f.Path == "" || f.Path == "." || path.Clean(f.Path) != f.Path || path.IsAbs(f.Path) ||
		f.Path == ".." || strings.HasPrefix(f.Path, "../") || strings.ContainsRune(f.Path, 0) || f.Path == ManifestName {
		return fmt.Errorf("invalid path %q", f.Path)
	}
	if f.Mode&^0o7777 != 0 {
		return fmt.Errorf("%q: invalid mode %#o", f.Path, f.Mode)
	}
	if f.Size < 0 {
		return fmt.Errorf("%q: negative size", f.Path)
	}
	switch f.Type {
	case TypeFile, TypeSymlink:
		if !hexRE.MatchString(f.SHA256) {
			return fmt.Errorf("%q: invalid sha256 %q", f.Path, f.SHA256)
		}
	case TypeDir, TypeFIFO:
		if f.SHA256 != "" || f.Size != 0 {
			return fmt.Errorf("%q: a %s has no size or sha256", f.Path, f.Type)
		}
	default:
		return fmt.Errorf("%q: unknown type %q", f.Path, f.Type)
	}
	return nil
}

// encode is the manifest as written to disk.
func (m *Manifest) encode() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// hexDigest is "sha256:" and hex, as the audit log writes digests.
func hexDigest(sum []byte) string { return "sha256:" + hex.EncodeToString(sum) }
