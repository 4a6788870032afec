package skills

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"unicode/utf8"
)

// ErrRange is returned by ReadFile for a negative offset or length, or an
// offset past the end of the file.
var ErrRange = errors.New("invalid range")

// DefaultMaxRead is how many bytes ReadFile returns at most when
// ReadOptions.MaxBytes is zero: enough for any sensible reference file, small
// enough to keep a model's context and the daemon's memory in check.
const DefaultMaxRead = 256 << 10

// FileContent is the result of a confined read, shaped like the skills.read
// tool result.
type FileContent struct {
	Path      string `json:"path"`      // the cleaned relative path
	Size      int64  `json:"size"`      // size of the whole file
	SHA256    string `json:"sha256"`    // hex digest of the whole file
	Encoding  string `json:"encoding"`  // "utf-8" or "base64"
	Content   string `json:"content"`   // the requested range
	Truncated bool   `json:"truncated"` // more bytes follow the returned range
}

// ReadOptions select a byte range. Length 0 means "to the end"; MaxBytes 0
// means DefaultMaxRead. A whole-file read of a larger file returns the first
// MaxBytes with Truncated set; an explicit Length above MaxBytes is refused.
type ReadOptions struct {
	Offset, Length, MaxBytes int64
}

// ReadFile reads rel inside the skill directory root without ever leaving
// it (see OpenInRoot) and returns the requested range. Text is returned as
// UTF-8, anything else base64-encoded.
func ReadFile(root, rel string, opts ReadOptions) (*FileContent, error) {
	limit := opts.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxRead
	}
	if opts.Offset < 0 || opts.Length < 0 {
		return nil, fmt.Errorf("%s: %w: offset and length must not be negative", rel, ErrRange)
	}
	if opts.Length > limit {
		return nil, fmt.Errorf("%s: %w: asked for %d bytes, at most %d per read; read in pieces with offset and length", rel, ErrTooLarge, opts.Length, limit)
	}
	clean, err := cleanRel(rel)
	if err != nil {
		return nil, err
	}
	f, err := OpenInRoot(root, clean)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", clean, err)
	}
	size := st.Size()
	if opts.Offset > size {
		return nil, fmt.Errorf("%s: %w: offset %d is past the end of the file (size %d)", clean, ErrRange, opts.Offset, size)
	}
	n := size - opts.Offset
	if opts.Length > 0 && opts.Length < n {
		n = opts.Length
	}
	if n > limit {
		n = limit
	}

	// One sequential pass: hash the whole file, keep only the range.
	h := sha256.New()
	buf := make([]byte, n)
	changed := fmt.Errorf("%s: file changed while it was read; try again", clean)
	if _, err := io.CopyN(h, f, opts.Offset); err != nil {
		return nil, changed
	}
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, changed
	}
	h.Write(buf)
	if _, err := io.CopyN(h, f, size-opts.Offset-n); err != nil {
		return nil, changed
	}

	fc := &FileContent{
		Path:      clean,
		Size:      size,
		SHA256:    hex.EncodeToString(h.Sum(nil)),
		Truncated: opts.Offset+n < size,
	}
	if fc.Truncated {
		buf = trimPartialRune(buf)
	}
	if isText(buf) {
		fc.Encoding, fc.Content = "utf-8", string(buf)
	} else {
		fc.Encoding, fc.Content = "base64", base64.StdEncoding.EncodeToString(buf)
	}
	return fc, nil
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of a cut, so
// a truncated text file is still returned as text.
func trimPartialRune(b []byte) []byte {
	for k := 1; k <= 3 && k <= len(b); k++ {
		if utf8.RuneStart(b[len(b)-k]) {
			if !utf8.FullRune(b[len(b)-k:]) {
				return b[:len(b)-k]
			}
			break
		}
	}
	return b
}

func isText(b []byte) bool {
	return utf8.Valid(b) && !strings.ContainsRune(string(b), 0)
}

// OpenInRoot opens the regular file rel inside the directory root for
// reading. rel must be relative and free of '..'; it is resolved by the
// kernel with openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS), so symlinks may
// be followed only while they stay inside root, and a concurrent rename or
// symlink swap cannot redirect it. Only regular files with a single link
// are returned: FIFOs, sockets, devices and directories are refused without
// blocking, and hardlinks are refused because they may alias files outside
// the skill. Errors wrap ErrEscape, ErrNotRegular or ErrNotFound.
func OpenInRoot(root, rel string) (*os.File, error) {
	clean, err := cleanRel(rel)
	if err != nil {
		return nil, err
	}
	f, err := openConfined(root, clean)
	if err != nil {
		return nil, err
	}
	if err := checkRegular(f, clean); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// cleanRel refuses what can never name a file inside a skill (absolute
// paths, '..', NUL) before the kernel sees it, with a message that says so.
func cleanRel(rel string) (string, error) {
	switch {
	case strings.IndexByte(rel, 0) >= 0:
		return "", fmt.Errorf("%q: %w: the path contains a NUL byte", rel, ErrEscape)
	case strings.HasPrefix(rel, "/"):
		return "", fmt.Errorf("%s: %w: absolute paths are not allowed; give a path relative to the skill directory, like references/guide.md", rel, ErrEscape)
	case !utf8.ValidString(rel):
		return "", fmt.Errorf("%q: %w: the path is not valid UTF-8", rel, ErrNotFound)
	}
	for _, part := range strings.Split(rel, "/") {
		if part == ".." {
			return "", fmt.Errorf("%s: %w: '..' is not allowed; give a path inside the skill directory", rel, ErrEscape)
		}
	}
	clean := path.Clean(rel)
	if clean == "." || rel == "" {
		return "", fmt.Errorf("%q: %w: that is the skill directory itself; name a file inside it", rel, ErrNotRegular)
	}
	return clean, nil
}

// checkRegular is the fstat half of the confinement: whatever the path
// resolved to, only a regular, singly linked file is let through.
func checkRegular(f *os.File, rel string) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return checkMode(st, rel)
}

func checkMode(st fs.FileInfo, rel string) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: %w: it is a %s; only regular files can be read", rel, ErrNotRegular, modeName(st.Mode()))
	}
	if n := linkCount(st); n > 1 {
		return fmt.Errorf("%s: %w: the file has %d hard links and may be shared with files outside the skill; copy it instead of hardlinking", rel, ErrEscape, n)
	}
	return nil
}

func modeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "special file"
}

// openWithRoot is the portable confinement through os.Root, used where
// openat2 is unavailable. O_NONBLOCK keeps a FIFO from blocking the open.
func openWithRoot(root, rel string) (*os.File, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, rootErr(root, err)
	}
	defer r.Close()
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		var pe *fs.PathError
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			return nil, notFound(rel)
		case errors.Is(err, syscall.ELOOP):
			return nil, fmt.Errorf("%s: %w: the path goes through a symlink loop or a link that leaves the skill", rel, ErrEscape)
		case errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes"):
			return nil, escapes(rel)
		}
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	return f, nil
}

func rootErr(root string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("skill directory %s: %w: it does not exist (was the skill removed?)", root, ErrNotFound)
	}
	return fmt.Errorf("skill directory %s: %w", root, err)
}

func notFound(rel string) error {
	return fmt.Errorf("%s: %w: no such file in the skill; check the path against the skill's SKILL.md", rel, ErrNotFound)
}

func escapes(rel string) error {
	return fmt.Errorf("%s: %w: it resolves outside the skill directory (through a symlink or '..'); only files inside the skill can be read", rel, ErrEscape)
}
