package workspace_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
)

// A run in a workspace: the files it names go in as job inputs, what it
// wrote comes back and is applied where the host copy is still the one
// the run started from.
func Example() {
	dir, _ := os.MkdirTemp("", "ws")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "notes.md"), []byte("draft\n"), 0o644)
	os.WriteFile(filepath.Join(dir, ".env"), []byte("TOKEN=x\n"), 0o600)

	w, err := workspace.Open(dir)
	if err != nil {
		panic(err)
	}
	defer w.Close()
	o := workspace.Options{} // glob.DefaultExcludes, default caps
	snap, err := w.Snapshot(nil, o)
	if err != nil {
		panic(err)
	}
	fmt.Println("in:", len(snap.Files), "file(s),", snap.Excluded, "excluded")

	// job.Files = snap.Files; res := run(job) ...; then:
	changes := workspace.Changes{Written: []runtime.OutputFile{
		{Path: "notes.md", Data: []byte("final\n")},
		{Path: "out/summary.txt", Data: []byte("ok\n")},
	}}
	rep, err := w.Apply(snap, changes, false, o)
	if err != nil {
		panic(err)
	}
	for _, c := range rep.Written {
		fmt.Println("written:", c.Path, c.Before != "")
	}
	// Output:
	// in: 1 file(s), 1 excluded
	// written: notes.md true
	// written: out/summary.txt false
}
