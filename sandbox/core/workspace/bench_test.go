package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchTree makes a workspace of 10,000 files of 1 KiB in 100 directories.
func benchTree(b *testing.B) *Workspace {
	b.Helper()
	dir := b.TempDir()
	data := make([]byte, 1024)
	for d := range 100 {
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for i := range 100 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%02d.txt", i)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	w, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	return w
}

// BenchmarkSnapshotOneInput: what a run that names one file of a large
// workspace pays; it must not grow with the workspace.
func BenchmarkSnapshotOneInput(b *testing.B) {
	w := benchTree(b)
	o := Options{Caps: Caps{Files: 20000}}
	for b.Loop() {
		s, err := w.Snapshot([]string{"d42/f42.txt"}, o)
		if err != nil || len(s.Files) != 1 {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshotWholeTree: the whole-tree mode on the same workspace.
func BenchmarkSnapshotWholeTree(b *testing.B) {
	w := benchTree(b)
	o := Options{Caps: Caps{Files: 20000}}
	for b.Loop() {
		s, err := w.Snapshot(nil, o)
		if err != nil || len(s.Files) != 10100 {
			b.Fatal(len(s.Files), err)
		}
	}
}

// BenchmarkSnapshotGlob: a glob walks the tree but reads only what it
// matches.
func BenchmarkSnapshotGlob(b *testing.B) {
	w := benchTree(b)
	for b.Loop() {
		s, err := w.Snapshot([]string{"d42/*.txt"}, Options{})
		if err != nil || len(s.Files) != 100 {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteAtBudget: what the budget adds to a piece of an upload
// (a 64 KiB rewrite of one file in a workspace of 10,000 files), with
// 256 other sessions of the uid in the ledger.
func BenchmarkWriteAtBudget(b *testing.B) {
	data := make([]byte, 64<<10)
	for _, budget := range []bool{false, true} {
		b.Run(fmt.Sprintf("budget=%v", budget), func(b *testing.B) {
			w := benchTree(b)
			o := Options{Quota: 1 << 30}
			if budget {
				bg := NewBudget(1<<40, 1<<40)
				for i := range 256 {
					a, _ := bg.Account(fmt.Sprintf("ses_%d", i), 1000)
					a.Add(1 << 20)
				}
				o.Account, _ = bg.Account("ses_bench", 1000)
			}
			for b.Loop() {
				if _, err := w.WriteAt("up.bin", 0, data, true, 0, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBudgetReserve: the ledger's own cost for one write (a
// reservation and its end), 256 sessions of the uid in it.
func BenchmarkBudgetReserve(b *testing.B) {
	bg := NewBudget(1<<40, 1<<40)
	for i := range 256 {
		a, _ := bg.Account(fmt.Sprintf("ses_%d", i), 1000)
		a.Add(1 << 20)
	}
	a, _ := bg.Account("ses_bench", 1000)
	for b.Loop() {
		r, err := a.Reserve(64 << 10)
		if err != nil {
			b.Fatal(err)
		}
		r.Done(0)
	}
}
