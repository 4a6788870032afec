package skills

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
)

// ManifestEntry is one readable file of a skill: its slash-separated path
// relative to the skill directory, size and SHA-256 (hex) of its bytes.
type ManifestEntry struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Manifest lists every file of the skill in dir that a confined read
// (ReadFile) would serve, in lexical order, hashing each through
// OpenInRoot, so what it lists is exactly what can be read. Entries a read
// would refuse (directories, symlinks, hardlinked files, FIFOs…) are not
// files of the skill and are left out; a file that vanishes while listing
// is skipped. It is what publishing a skill with per-file digests needs
// (the MCP skills extension's resource manifest).
func Manifest(dir string) ([]ManifestEntry, error) {
	var out []ManifestEntry
	err := walkSkill(dir, func(rel string, fi fs.FileInfo) error {
		if !fi.Mode().IsRegular() || linkCount(fi) > 1 {
			return nil
		}
		f, err := OpenInRoot(dir, rel)
		if err != nil {
			return nil // replaced or removed since the walk saw it
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		out = append(out, ManifestEntry{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		return nil
	})
	return out, err
}
