package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/skillbox/skillbox/runtime"
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

// collect runs the collector over wd with no inputs: everything is new.
func collect(t *testing.T, wd string, lim runtime.Limits) *Outputs {
	t.Helper()
	o, err := collectOutputs(wd, lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestCollectOutputs(t *testing.T) {
	wd := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	writeTree(t, wd, map[string]string{
		"outputs/a.txt":       "alpha",
		"outputs/sub/b.txt":   "bravo",
		"outputs/sub/c/d.txt": "delta",
		"unpacked/ppt/p.xml":  "<p/>",
		"top.txt":             "top",
	})
	writeTree(t, filepath.Dir(secret), map[string]string{"secret": "TOP SECRET"})
	if err := os.Symlink(secret, filepath.Join(wd, "outputs/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(wd, "outputs/dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../etc/passwd", filepath.Join(wd, "rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(wd, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(wd, "outputs/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := collect(t, wd, runtime.Limits{})
	var paths []string
	for _, f := range o.Files {
		paths = append(paths, f.Path+"="+string(f.Data))
		sum := sha256.Sum256(f.Data)
		if f.SHA256 != hex.EncodeToString(sum[:]) || f.Size != int64(len(f.Data)) {
			t.Errorf("%s: size/hash wrong", f.Path)
		}
	}
	if got := strings.Join(paths, ","); got != "outputs/a.txt=alpha,outputs/sub/b.txt=bravo,outputs/sub/c/d.txt=delta,top.txt=top,unpacked/ppt/p.xml=<p/>" {
		t.Errorf("collected %s", got)
	}
	sk := strings.Join(o.Skipped, "\n")
	for _, want := range []string{"outputs/link: symlink", "outputs/dirlink: symlink", "outputs/fifo: fifo", "rel: symlink", "dangling: symlink"} {
		if !strings.Contains(sk, want) {
			t.Errorf("skipped %q lacks %q", o.Skipped, want)
		}
	}
	for _, f := range o.Files {
		if strings.Contains(string(f.Data), "SECRET") {
			t.Error("followed a symlink")
		}
	}
	if o.Truncated || o.OmittedFiles != 0 {
		t.Errorf("truncated without a cap: %+v", o)
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
	for _, tc := range []struct {
		name      string
		lim       runtime.Limits
		files     int
		by        string
		omitted   int
		omittedB  int64
		skipFirst string
	}{
		{"files", runtime.Limits{OutputFiles: 2}, 2, runtime.CapOutputFiles, 2, 12, "outputs/3: over the cap of 2 output files (output_files)"},
		{"total bytes", runtime.Limits{OutputBytes: 10}, 2, runtime.CapOutputBytes, 2, 12, "outputs/3: 4 bytes would exceed the 10-byte cap for all outputs (output_bytes)"},
		{"file bytes", runtime.Limits{OutputFileBytes: 5}, 3, runtime.CapOutputFileBytes, 1, 8, "outputs/4: 8 bytes, over the 5-byte cap for one output file (output_file_bytes)"},
		{"none", runtime.Limits{}, 4, "", 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := collect(t, wd, tc.lim)
			if len(o.Files) != tc.files || o.TruncatedBy != tc.by || o.Truncated != (tc.by != "") ||
				o.OmittedFiles != tc.omitted || o.OmittedBytes != tc.omittedB || len(o.Skipped) != tc.omitted {
				t.Fatalf("got %d files, %+v", len(o.Files), o)
			}
			if tc.skipFirst != "" && !strings.Contains(o.Skipped[0], tc.skipFirst) {
				t.Errorf("skipped %q, want %q", o.Skipped[0], tc.skipFirst)
			}
		})
	}
}

func TestCollectOutputsOddOutputsDir(t *testing.T) {
	// No outputs/: nothing, no error.
	wd := t.TempDir()
	if o := collect(t, wd, runtime.Limits{}); o.Files != nil || o.Skipped != nil {
		t.Errorf("empty workdir: %+v", o)
	}
	// outputs/ replaced by a symlink to somewhere else: not followed.
	target := t.TempDir()
	writeTree(t, target, map[string]string{"x": "host file"})
	if err := os.Symlink(target, filepath.Join(wd, "outputs")); err != nil {
		t.Fatal(err)
	}
	if o := collect(t, wd, runtime.Limits{}); len(o.Files) != 0 || len(o.Skipped) != 1 || !strings.Contains(o.Skipped[0], "symlink") {
		t.Errorf("outputs symlink: %+v", o)
	}
}

func TestCollectOutputsDepth(t *testing.T) {
	wd := t.TempDir()
	deep := "outputs/" + strings.Repeat("d/", maxOutputDepth+2) + "f"
	writeTree(t, wd, map[string]string{deep: "deep", "outputs/top": "top"})
	o := collect(t, wd, runtime.Limits{})
	if len(o.Files) != 1 || o.Files[0].Path != "outputs/top" || len(o.Skipped) != 1 || !strings.Contains(o.Skipped[0], "deeper") {
		t.Errorf("depth: %+v", o)
	}
}

// However many entries a script leaves and however it names them, the
// report about what was skipped stays small and printable, and the counts
// stay exact.
func TestCollectOutputsSkippedReportIsBounded(t *testing.T) {
	wd := t.TempDir()
	files := map[string]string{}
	for i := 0; i < 3*maxSkippedNamed; i++ {
		// Paths longer than a report keeps: a long directory, a long name.
		files[filepath.Join("outputs", strings.Repeat("d", 200), strings.Repeat("n", 200)+strconv.Itoa(i))] = "x"
	}
	files["outputs/evil\nname\x1b[31m"] = "x"
	writeTree(t, wd, files)
	o := collect(t, wd, runtime.Limits{OutputFiles: 1})
	if len(o.Files) != 1 {
		t.Fatalf("collected %d files, want 1", len(o.Files))
	}
	// One of the 300 is collected; the evil name is skipped for its name,
	// not counted against the cap.
	if o.OmittedFiles != 3*maxSkippedNamed-1 || o.TruncatedBy != runtime.CapOutputFiles {
		t.Errorf("omitted %d by %q, want %d by output_files", o.OmittedFiles, o.TruncatedBy, 3*maxSkippedNamed-1)
	}
	skipped := o.Skipped
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

// BenchmarkCollectOutputs5000 collects 5,000 small new files in 50
// directories, the shape of a large unpacked document.
func BenchmarkCollectOutputs5000(b *testing.B) {
	wd := b.TempDir()
	data := []byte(strings.Repeat("<w:p>x</w:p>", 100))
	for d := 0; d < 50; d++ {
		dir := filepath.Join(wd, "unpacked", "part"+strconv.Itoa(d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < 100; f++ {
			if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(f)+".xml"), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		o, err := collectOutputs(wd, runtime.Limits{}, nil)
		if err != nil || len(o.Files) != 5000 || o.Truncated {
			b.Fatalf("%d files, %v", len(o.Files), err)
		}
	}
}

// Every special file a script leaves in the workdir is
// named in outputs_skipped with what it is, at any depth: FIFOs, sockets,
// character and block devices (the devices need root to make).
func TestOutputsNameSpecialFiles(t *testing.T) {
	wd := t.TempDir()
	writeTree(t, wd, map[string]string{"outputs/real.txt": "real"})
	type special struct {
		rel, kind string
		make      func(p string) error
		root      bool
	}
	for _, s := range []special{
		{"fifo", "fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, false},
		{"outputs/deep/fifo", "fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, false},
		{"sock", "socket", func(p string) error {
			l, err := net.Listen("unix", p)
			if err != nil {
				return err
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			return l.Close()
		}, false},
		{"outputs/null", "character device", func(p string) error { return syscall.Mknod(p, syscall.S_IFCHR|0o644, 1<<8|3) }, true},
		{"loop", "block device", func(p string) error { return syscall.Mknod(p, syscall.S_IFBLK|0o644, 7<<8|0) }, true},
	} {
		t.Run(s.rel, func(t *testing.T) {
			if s.root && os.Geteuid() != 0 {
				t.Skip("making a device node needs root")
			}
			p := filepath.Join(wd, s.rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := s.make(p); err != nil {
				t.Fatal(err)
			}
			o := collect(t, wd, runtime.Limits{})
			if want := s.rel + ": " + s.kind + ", not collected"; !slices.Contains(o.Skipped, want) {
				t.Errorf("skipped %q lacks %q", o.Skipped, want)
			}
			if len(o.Files) != 1 || o.Files[0].Path != "outputs/real.txt" {
				t.Errorf("files %+v, want outputs/real.txt only", o.Files)
			}
		})
	}
}
