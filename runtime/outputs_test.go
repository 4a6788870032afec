package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCollectOutputs(t *testing.T) {
	wd := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	writeTree(t, wd, map[string]string{
		"outputs/a.txt":       "alpha",
		"outputs/sub/b.txt":   "bravo",
		"outputs/sub/c/d.txt": "delta",
		"not-an-output.txt":   "ignored",
	})
	writeTree(t, filepath.Dir(secret), map[string]string{"secret": "TOP SECRET"})
	if err := os.Symlink(secret, filepath.Join(wd, "outputs/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(wd, "outputs/dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(wd, "outputs/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, skipped, err := CollectOutputs(wd, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path+"="+string(f.Data))
		sum := sha256.Sum256(f.Data)
		if f.SHA256 != hex.EncodeToString(sum[:]) || f.Size != int64(len(f.Data)) {
			t.Errorf("%s: size/hash wrong", f.Path)
		}
	}
	if got := strings.Join(paths, ","); got != "a.txt=alpha,sub/b.txt=bravo,sub/c/d.txt=delta" {
		t.Errorf("collected %s", got)
	}
	sk := strings.Join(skipped, "\n")
	for _, want := range []string{"link: symlink", "dirlink: symlink", "fifo: fifo"} {
		if !strings.Contains(sk, want) {
			t.Errorf("skipped %q lacks %q", skipped, want)
		}
	}
	for _, f := range files {
		if strings.Contains(string(f.Data), "SECRET") {
			t.Error("followed a symlink")
		}
	}
}

func TestCollectOutputsCaps(t *testing.T) {
	wd := t.TempDir()
	writeTree(t, wd, map[string]string{
		"outputs/1": "1111",
		"outputs/2": "2222",
		"outputs/3": "3333",
		"outputs/4": "44444444",
	})
	files, skipped, err := CollectOutputs(wd, Limits{OutputFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || len(skipped) != 2 || !strings.Contains(skipped[0], "3: over the cap of 2 output files") {
		t.Errorf("files %d skipped %q", len(files), skipped)
	}
	files, skipped, err = CollectOutputs(wd, Limits{OutputBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || len(skipped) != 2 || !strings.Contains(skipped[1], "4: 8 bytes would exceed the 10-byte output cap") {
		t.Errorf("files %d skipped %q", len(files), skipped)
	}
}

func TestCollectOutputsOddOutputsDir(t *testing.T) {
	// No outputs/: nothing, no error.
	wd := t.TempDir()
	files, skipped, err := CollectOutputs(wd, Limits{})
	if err != nil || files != nil || skipped != nil {
		t.Errorf("no outputs dir: %v %v %v", files, skipped, err)
	}
	// outputs/ replaced by a symlink to somewhere else: not followed.
	target := t.TempDir()
	writeTree(t, target, map[string]string{"x": "host file"})
	if err := os.Symlink(target, filepath.Join(wd, "outputs")); err != nil {
		t.Fatal(err)
	}
	files, skipped, err = CollectOutputs(wd, Limits{})
	if err != nil || len(files) != 0 || len(skipped) != 1 || !strings.Contains(skipped[0], "symlink") {
		t.Errorf("outputs symlink: %v %q %v", files, skipped, err)
	}
}

func TestCollectOutputsDepth(t *testing.T) {
	wd := t.TempDir()
	deep := "outputs/" + strings.Repeat("d/", maxOutputDepth+2) + "f"
	writeTree(t, wd, map[string]string{deep: "deep", "outputs/top": "top"})
	files, skipped, err := CollectOutputs(wd, Limits{})
	if err != nil || len(files) != 1 || files[0].Path != "top" || len(skipped) != 1 || !strings.Contains(skipped[0], "deeper") {
		t.Errorf("depth: %v %q %v", files, skipped, err)
	}
}

// However many entries a script leaves and however it names them, the
// report about what was skipped stays small and printable.
func TestCollectOutputsSkippedReportIsBounded(t *testing.T) {
	wd := t.TempDir()
	files := map[string]string{}
	for i := 0; i < 3*maxSkippedNamed; i++ {
		// Paths longer than a report keeps: a long directory, a long name.
		files[filepath.Join("outputs", strings.Repeat("d", 200), strings.Repeat("n", 200)+strconv.Itoa(i))] = "x"
	}
	files["outputs/evil\nname\x1b[31m"] = "x"
	writeTree(t, wd, files)
	got, skipped, err := CollectOutputs(wd, Limits{OutputFiles: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("collected %d files, want 1", len(got))
	}
	if len(skipped) != maxSkippedNamed+1 {
		t.Fatalf("%d skipped lines, want %d named plus one summary", len(skipped), maxSkippedNamed)
	}
	if last := skipped[len(skipped)-1]; !strings.Contains(last, "more entries not collected") {
		t.Errorf("no summary line: %q", last)
	}
	for _, s := range skipped {
		if len(s) > maxNameReported+200 {
			t.Errorf("line of %d bytes: %.80q...", len(s), s)
		}
		if strings.ContainsAny(s, "\n\x1b") {
			t.Errorf("unescaped control character in %q", s)
		}
	}
}
