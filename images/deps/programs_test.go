package deps

import (
	"os"
	"path/filepath"
	"testing"
)

func TestListPrograms(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755)
	os.MkdirAll(filepath.Join(root, "usr", "local", "bin"), 0o755)
	os.MkdirAll(filepath.Join(root, "opt", "tool"), 0o755)
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	os.Symlink("/usr/sbin", filepath.Join(root, "sbin")) // absolute: never followed (it would be the host's)
	os.WriteFile(filepath.Join(root, "usr", "bin", "bash"), nil, 0o755)
	os.WriteFile(filepath.Join(root, "usr", "bin", "README"), nil, 0o644)
	os.Symlink("bash", filepath.Join(root, "usr", "bin", "sh"))
	os.WriteFile(filepath.Join(root, "usr", "local", "bin", "tool"), nil, 0o755)
	os.WriteFile(filepath.Join(root, "opt", "tool", "run"), nil, 0o755)
	os.MkdirAll(filepath.Join(root, "usr", "bin", "subdir"), 0o755)
	p := ListPrograms(root)
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"bash", true}, {"sh", true}, {"tool", true}, {"/bin/bash", true}, {"/usr/bin/sh", true},
		{"/usr/local/bin/tool", true}, {"/opt/tool/run", true},
		{"README", false}, {"subdir", false}, {"pdfinfo", false}, {"/opt/tool/none", false}, {"ls", false},
	} {
		if got := p.Has(tc.name); got != tc.want {
			t.Errorf("Has(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := p.Lacking([]ShellCall{{"bash", 1}, {"qpdf", 2}, {"pdfinfo", 3}, {"qpdf", 4}}); len(got) != 2 || got[0] != "pdfinfo" || got[1] != "qpdf" {
		t.Errorf("Lacking = %q", got)
	}
}
