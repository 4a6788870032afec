package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

// FuzzSnapshotInputs: whatever inputs a caller sends, Snapshot never
// panics or hangs, takes only paths of the workspace that pass
// ValidateInputs, never the excluded or hostile ones, and reports errors
// of a kind.
func FuzzSnapshotInputs(f *testing.F) {
	for _, s := range []string{
		"", "a.txt", "sub", "sub/", "*.txt", "**", "../outside/canary.txt", "/etc/passwd", "link/canary.txt",
		"out/", "pipe", ".git/config", "sub/**/x\nsub/deep", "l*", "[", "a.txt\na.txt", "missing",
	} {
		f.Add(s)
	}
	fx := newFixture(f) // built once, for every input list
	fx.file("a.txt", "a")
	fx.file("sub/deep/x", "x")
	fx.file("sub/y.txt", "y")
	fx.file(".git/config", "c")
	fx.symlink("link", "../outside")
	fx.symlink("out", fx.outside)
	fx.symlink("sub/in", "../a.txt")
	fx.fifo("pipe")
	w, err := Open(fx.ws)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { w.Close() })
	f.Fuzz(func(t *testing.T, list string) {
		var inputs []string
		if list != "" {
			inputs = strings.Split(list, "\n")
			if len(inputs) > 8 {
				return
			}
		}
		s, err := w.Snapshot(inputs, Options{})
		if err != nil {
			if !errors.Is(err, api.ErrInvalidParams) && !errors.Is(err, api.ErrNotFound) {
				t.Fatalf("Snapshot(%q) = %v: not of a caller's kind", inputs, err)
			}
			return
		}
		if err := runtime.ValidateInputs(s.Files, 1<<30); err != nil {
			t.Fatalf("Snapshot(%q) gives invalid inputs: %v", inputs, err)
		}
		for _, in := range s.Files {
			if strings.HasPrefix(in.Name, ".git") || in.Name == "pipe" || in.Name == "link" || in.Name == "out" {
				t.Fatalf("Snapshot(%q) took %q", inputs, in.Name)
			}
			if _, err := os.Lstat(filepath.Join(fx.ws, in.Name)); err != nil {
				t.Fatalf("Snapshot(%q) took %q, not in the workspace: %v", inputs, in.Name, err)
			}
			if strings.Contains(string(in.Data), "canary") {
				t.Fatalf("Snapshot(%q) read the canary as %q", inputs, in.Name)
			}
		}
		data, err := os.ReadFile(fx.canary)
		if err != nil || string(data) != canaryData {
			t.Fatalf("canary changed")
		}
	})
}

// FuzzApplyPaths: whatever paths a run's changes name, Apply never
// panics, never errors on a usable workspace, and never writes or deletes
// outside it, through a symlink or otherwise.
func FuzzApplyPaths(f *testing.F) {
	for _, s := range [][2]string{
		{"a.txt", "a.txt"}, {"up/outside/canary.txt", "up/outside/canary.txt"}, {"abs/canary.txt", "abs/canary.txt"},
		{"../outside/canary.txt", "/etc/passwd"}, {"d/new/x", "d/file"}, {"link", "link"}, {"d/file/x", ".git/config"},
	} {
		f.Add(s[0], s[1])
	}
	fx := newFixture(f)
	fx.file("a.txt", "a")
	fx.file("d/file", "f")
	fx.file(".git/config", "c")
	fx.symlink("up", "..")
	fx.symlink("abs", fx.outside)
	fx.symlink("link", "a.txt")
	w, err := Open(fx.ws)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { w.Close() })
	base, err := w.Snapshot(nil, Options{Excludes: []string{}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, write, del string) {
		rep, err := w.Apply(base, Changes{Written: []runtime.OutputFile{out(write, "fuzz")}, Deleted: []string{del}}, true, Options{})
		if err != nil {
			t.Fatalf("Apply(%q, %q) = %v", write, del, err)
		}
		if n := len(rep.Written) + len(rep.Deleted) + len(rep.Conflicts) + len(rep.Refused); n == 0 && write != "a.txt" {
			// Every change is accounted for, unless nothing was to do.
			if _, err := os.Lstat(filepath.Join(fx.ws, write)); err != nil {
				t.Fatalf("Apply(%q, %q) reported nothing and wrote nothing", write, del)
			}
		}
		data, err := os.ReadFile(fx.canary)
		if err != nil || string(data) != canaryData {
			t.Fatalf("canary changed by Apply(%q, %q)", write, del)
		}
		ents, err := os.ReadDir(fx.outside)
		if err != nil || len(ents) != 1 {
			t.Fatalf("Apply(%q, %q) wrote outside the workspace: %v", write, del, ents)
		}
	})
}
