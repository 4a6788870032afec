package stack_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/skillbox/skillbox/"

// layers is the picture of docs/ARCHITECTURE.md ("The layers"), top to
// bottom: a package imports only packages of rows below its own, never one
// of its row or above.
var layers = [][]string{
	{"cmd/skillbox"},
	// the frame: wiring, benchmarks, observability
	{"sandbox/frame/bench"},
	{"sandbox/frame/stack", "sandbox/frame/metrics/metricstest", "sandbox/frame/tracing/tracingtest"},
	{"sandbox/frame/metrics", "sandbox/frame/tracing"},
	// the doors (front ends) and the client
	{"sandbox/doors/daemon", "sandbox/doors/console"},
	{"sandbox/doors/jsonrpc", "sandbox/doors/mcp", "sandbox/client"},
	{"sandbox/doors/connlimit", "sandbox/doors/sockfile", "sandbox/doors/console/web"},
	// the core
	{"sandbox/core/service/servicetest", "sandbox/core/audit/siem", "sandbox/core/audit/audittest"},
	{"sandbox/core/service"},
	{"sandbox/core/runner"},
	{"sandbox/core/runner/layers", "sandbox/core/runner/sessionbox"},
	{"sandbox/core/store", "sandbox/core/audit", "sandbox/core/workspace", "sandbox/core/store/storetest"},
	// the wire contract
	{"sandbox/api"},
	// below sandbox/: images, rules, skills, backends
	{"images", "policy", "skills"},
	{"images/deps", "policy/glob"},
	{"runtime/ocicli", "runtime/containerd", "runtime/kubernetes"},
	{"runtime/supervisor"},
	{"runtime/process", "runtime/tarstream"},
	{"runtime/oci", "runtime/runtimetest"},
	{"runtime"},
	{"runtime/egress", "runtime/checkpoint", "runtime/rootless", "runtime/egress/egresstest"},
	// the ground shelf: imports nothing of skillbox
	{"runtime/errkind", "runtime/outcome", "runtime/span", "runtime/waitfor", "runtime/golden", "policy/replicaname", "runtime/agentauth"},
}

// TestImportLayers keeps the imports of every package (its non-test files)
// going one way, down the picture, and every package in it.
func TestImportLayers(t *testing.T) {
	row := map[string]int{}
	for i, r := range layers {
		for _, p := range r {
			row[p] = i
		}
	}
	imports := map[string]map[string]bool{}
	root := filepath.Join("..", "..", "..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, root+string(filepath.Separator))))
		if f.Name.Name == "main" && pkg != "cmd/skillbox" {
			return nil // tools under hack/ and examples/
		}
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if rest, ok := strings.CutPrefix(p, module); ok {
				imports[pkg][rest] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 10 {
		t.Fatalf("found only %d packages under %s", len(imports), root)
	}
	for pkg, ims := range imports {
		from, ok := row[pkg]
		if !ok {
			t.Errorf("package %s is not in the picture: add it to layers here and to docs/ARCHITECTURE.md", pkg)
			continue
		}
		for im := range ims {
			to, ok := row[im]
			if ok && to <= from {
				t.Errorf("%s (row %d) imports %s (row %d): imports go down the picture only", pkg, from, im, to)
			}
			if below := !strings.HasPrefix(pkg, "sandbox/") && !strings.HasPrefix(pkg, "cmd/"); below && strings.HasPrefix(im, "sandbox/") {
				t.Errorf("%s imports %s: the packages below sandbox/ import nothing of it", pkg, im)
			}
		}
	}
}
