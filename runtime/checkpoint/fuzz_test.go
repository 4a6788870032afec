package checkpoint

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzLoadManifest: whatever a manifest.json holds, ParseManifest returns
// a manifest or an error, never panics, and a manifest it accepts has only
// paths inside the checkpoint and encodes back to one it accepts the same.
func FuzzLoadManifest(f *testing.F) {
	h := strings.Repeat("0f", 32)
	f.Add([]byte(`{"format":1,"id":"ck-0123456789abcdef01234567","session":"s","parent":"","created":"2026-11-26T09:00:00Z","runsc_version":"r","platform":"systrap","network":"none","image":"python","image_digest":"d","spec_digest":"s","skill_digests":{"pdf":"sha256:1"},"files":[{"path":"image","type":"dir","size":0,"mode":448},{"path":"image/checkpoint.img","type":"file","size":3,"mode":420,"sha256":"` + h + `"},{"path":"work","type":"dir","size":0,"mode":1023},{"path":"work/l","type":"symlink","size":2,"mode":511,"sha256":"` + h + `"}],"total_bytes":5}`))
	f.Add([]byte(`{"format":1,"id":"ck-0123456789abcdef01234567","files":[{"path":"../x","type":"file"}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		for _, fl := range m.Files {
			if strings.HasPrefix(fl.Path, "/") || fl.Path == ".." || strings.HasPrefix(fl.Path, "../") || strings.Contains(fl.Path, "/../") {
				t.Fatalf("accepted path %q", fl.Path)
			}
		}
		enc, err := m.encode()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(enc)
		if err != nil {
			t.Fatalf("accepted once, refused its own encoding: %v\n%s", err, enc)
		}
		enc2, _ := m2.encode()
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable:\n%s\n%s", enc, enc2)
		}
	})
}
