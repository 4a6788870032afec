package deps

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A source's missing wheels, remembered. Finding that an index has no wheel
// of an optional package costs a pip run; a one-shot `skillbox run` would
// pay it for every missing image extra before every run. The store keeps
// what each source lacked for each image for UnservedTTL (so a mirror that
// gains the package is asked again within the hour), in one small file
// beside the layers; it is a cache: losing it costs only the pip runs.

// UnservedTTL is how long a source's missing wheel is remembered.
const UnservedTTL = time.Hour

const unservedFile = "unserved.json"

type unservedEntry struct {
	Why string    `json:"why"`
	At  time.Time `json:"at"`
}

// ID names the Python source in the store's memory of missing wheels.
func (s Sources) ID() string {
	return strings.Join(append([]string{s.PythonIndex}, s.FindLinks...), " ")
}

func unservedKey(imageDigest, source string) string { return imageDigest + " " + source }

func (s *Store) readUnserved() map[string]map[string]unservedEntry {
	out := map[string]map[string]unservedEntry{}
	if b, err := os.ReadFile(filepath.Join(s.dir, unservedFile)); err == nil {
		_ = json.Unmarshal(b, &out) // a damaged cache is an empty one
	}
	return out
}

// Unserved returns the packages (normalised name → why) source had no
// wheel of for the image with imageDigest within UnservedTTL.
func (s *Store) Unserved(imageDigest, source string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[string]string
	for name, e := range s.readUnserved()[unservedKey(imageDigest, source)] {
		if time.Since(e.At) < UnservedTTL {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = e.Why
		}
	}
	return out
}

// MarkUnserved remembers that source has no wheel of name for the image
// (expired entries are dropped on the way).
func (s *Store) MarkUnserved(imageDigest, source, name, why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.readUnserved()
	for k, m := range all {
		for n, e := range m {
			if time.Since(e.At) >= UnservedTTL {
				delete(m, n)
			}
		}
		if len(m) == 0 {
			delete(all, k)
		}
	}
	k := unservedKey(imageDigest, source)
	if all[k] == nil {
		all[k] = map[string]unservedEntry{}
	}
	all[k][name] = unservedEntry{Why: why, At: time.Now().UTC()}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".unserved-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(s.dir, unservedFile))
}
