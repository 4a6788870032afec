package deps

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// layerFormat is folded into every key; bump it when the layout of a layer
// or the way it is built changes.
const layerFormat = "skillbox-deps/1"

// Paths inside a layer tree (and so under runtime.DepsMount).
const (
	PythonDir = "python"       // pip --target
	NodeDir   = "node_modules" // node_modules
)

// Key is the layer digest ("sha256:…") of set on the image with imageDigest.
func Key(imageDigest string, s *Set) string {
	canon := struct {
		Format      string   `json:"format"`
		Image       string   `json:"image"`
		Python      []string `json:"python"`
		Npm         []string `json:"npm"`
		NpmLock     string   `json:"npm_lock"`
		AllowSource bool     `json:"allow_source"`
	}{Format: layerFormat, Image: imageDigest, NpmLock: s.NpmLockSHA256, AllowSource: s.AllowSource}
	for _, r := range s.Python {
		canon.Python = append(canon.Python, r.Line())
	}
	for _, d := range s.Npm {
		canon.Npm = append(canon.Npm, d.Name+"@"+d.Range)
	}
	b, _ := json.Marshal(canon)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Artifact is one fetched file that went into a layer.
type Artifact struct {
	Ecosystem string `json:"ecosystem"`
	Name      string `json:"name"`
	Version   string `json:"version,omitempty"`
	File      string `json:"file"`
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size"`
	// Integrity is npm's SRI hash from the lock, when there is one.
	Integrity string `json:"integrity,omitempty"`
}

// Manifest describes a built layer; it is written as manifest.json beside
// the layer's tree.
type Manifest struct {
	Digest      string        `json:"digest"`
	Image       string        `json:"image"`
	ImageDigest string        `json:"image_digest"`
	Python      []Requirement `json:"python,omitempty"`
	Npm         []NpmDep      `json:"npm,omitempty"`
	Artifacts   []Artifact    `json:"artifacts"`
	Built       time.Time     `json:"built"`
	BuildMS     int64         `json:"build_ms"`
	Size        int64         `json:"size"`
}

// Layer is a built layer in the store.
type Layer struct {
	Manifest
	// Dir is the host directory mounted read-only at runtime.DepsMount.
	Dir string `json:"dir"`
	// Users are the skills (name → digest) that used the layer last.
	Users map[string]string `json:"users,omitempty"`
}

// Store keeps layers beside the images:
//
//	<images>/layers/sha256-<hex>/manifest.json
//	<images>/layers/sha256-<hex>/tree/        (python/, node_modules/)
//	<images>/layers/sha256-<hex>/users.json   skills that use it
//	<images>/layers/.build-*                  builds in progress
//	<images>/layers/unserved.json             wheels sources lacked (unserved.go)
//
// A layer appears by rename once complete, so a reader never sees half of one.
type Store struct {
	dir string
	mu  sync.Mutex
}

// OpenStore opens the layer store under the image store dir; the
// directory is made by the first build.
func OpenStore(imagesDir string) *Store {
	return &Store{dir: filepath.Join(imagesDir, "layers")}
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(digest string) (string, error) {
	hexd, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexd) != 64 || strings.Trim(hexd, "0123456789abcdef") != "" {
		return "", errkind.Errorf(ErrInvalid, "layer digest %q", digest)
	}
	return filepath.Join(s.dir, "sha256-"+hexd), nil
}

// Get returns the layer with digest, or fs.ErrNotExist.
func (s *Store) Get(digest string) (*Layer, error) {
	p, err := s.path(digest)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(p, "manifest.json"))
	if err != nil {
		return nil, err
	}
	l := &Layer{Dir: filepath.Join(p, "tree")}
	if err := json.Unmarshal(b, &l.Manifest); err != nil {
		return nil, fmt.Errorf("layer %s: manifest: %w", digest, err)
	}
	if ub, err := os.ReadFile(filepath.Join(p, "users.json")); err == nil {
		_ = json.Unmarshal(ub, &l.Users)
	}
	return l, nil
}

// List returns every layer, newest first.
func (s *Store) List() ([]*Layer, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Layer
	for _, e := range entries {
		h, ok := strings.CutPrefix(e.Name(), "sha256-")
		if !ok || !e.IsDir() {
			continue
		}
		l, err := s.Get("sha256:" + h)
		if err != nil {
			continue
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Built.After(out[j].Built) })
	return out, nil
}

// AddUser records that skill (at digest) uses the layer.
func (s *Store) AddUser(layerDigest, skill, skillDigest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.path(layerDigest)
	if err != nil {
		return err
	}
	users := map[string]string{}
	if ub, err := os.ReadFile(filepath.Join(p, "users.json")); err == nil {
		_ = json.Unmarshal(ub, &users)
	}
	if users[skill] == skillDigest {
		return nil
	}
	users[skill] = skillDigest
	b, _ := json.MarshalIndent(users, "", "  ")
	tmp := filepath.Join(p, ".users.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(p, "users.json"))
}

// staging makes a scratch directory for one build inside the store (same
// file system, so the finished layer can be renamed into place).
func (s *Store) staging() (string, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return "", fmt.Errorf("dependency layer store %s: %w", s.dir, err)
	}
	return os.MkdirTemp(s.dir, ".build-")
}

// commit moves a finished build (stage holding tree/) into place under m's
// digest. A layer that appeared meanwhile (another process built the same
// set) wins; the stage is dropped.
func (s *Store) commit(stage string, m *Manifest) (*Layer, error) {
	size, _ := treeSize(filepath.Join(stage, "tree"))
	m.Size = size
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(stage, "manifest.json"), b, 0o644); err != nil {
		return nil, err
	}
	// Read-only for everyone but root: the tree is mounted read-only too.
	_ = filepath.WalkDir(filepath.Join(stage, "tree"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		info, err := d.Info()
		if err == nil {
			mode := os.FileMode(0o644)
			if info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			return os.Chmod(p, mode)
		}
		return nil
	})
	if err := os.Chmod(stage, 0o755); err != nil {
		return nil, err
	}
	final, err := s.path(m.Digest)
	if err != nil {
		return nil, err
	}
	if err := os.Rename(stage, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, "manifest.json")); serr == nil {
			os.RemoveAll(stage)
			return s.Get(m.Digest)
		}
		return nil, errkind.Errorf(ErrBuild, "storing layer: %w", err)
	}
	return s.Get(m.Digest)
}

// Prune removes the layers no skill uses any more (keep says whether a
// layer is still wanted) and builds left behind by a crash. It returns the
// removed directories. Like images prune it is never implicit: a running
// job may still have an old layer mounted.
func (s *Store) Prune(keep func(*Layer) bool) ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		p := filepath.Join(s.dir, e.Name())
		if strings.HasPrefix(e.Name(), ".build-") {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
				if err := os.RemoveAll(p); err != nil {
					return removed, err
				}
				removed = append(removed, p)
			}
			continue
		}
		h, ok := strings.CutPrefix(e.Name(), "sha256-")
		if !ok {
			continue
		}
		l, err := s.Get("sha256:" + h)
		if err == nil && keep(l) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}

func treeSize(root string) (int64, error) {
	var n int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err
}
