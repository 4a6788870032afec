package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestReasonsMatchRuntime ties api.Reason* to runtime.Reason*: the run end
// reasons a front end sees are the runtime's, and api does not import
// runtime, so both lists are read from the sources and must name the same
// constants with the same values.
func TestReasonsMatchRuntime(t *testing.T) {
	apiReasons := reasonConsts(t, ".")
	rtReasons := reasonConsts(t, filepath.Join("..", "..", "runtime"))
	if len(rtReasons) == 0 || len(apiReasons) == 0 {
		t.Fatalf("no Reason constants found: api %v, runtime %v", apiReasons, rtReasons)
	}
	if !maps.Equal(apiReasons, rtReasons) {
		t.Errorf("api.Reason* and runtime.Reason* differ:\napi:     %v\nruntime: %v", sorted(apiReasons), sorted(rtReasons))
	}
}

// reasonConsts returns the string constants named Reason* declared in the
// non-test Go files of dir.
func reasonConsts(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Reason") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out[id.Name] = v
					}
				}
			}
		}
	}
	return out
}

func sorted(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}
