package golden

import (
	"path/filepath"
	"testing"
)

// TestJSONAnyOrder: the file's keys in another order still match, the
// same keys with another value do not, and JSON holds the order too.
func TestJSONAnyOrder(t *testing.T) {
	if *update {
		t.Skip("its file is written by hand")
	}
	type ab struct {
		A int    `json:"a"`
		B string `json:"b"`
	}
	type ba struct {
		B string `json:"b"`
		A int    `json:"a"`
	}
	file := filepath.Join("testdata", "ab.json")
	JSON(t, file, ab{A: 1, B: "x"})
	JSONAnyOrder(t, file, ba{B: "x", A: 1})
	for name, check := range map[string]func(testing.TB, string, any){"JSON": JSON, "JSONAnyOrder": JSONAnyOrder} {
		t.Run(name, func(t *testing.T) {
			var other fakeT
			check(&other, file, ab{A: 2, B: "x"})
			if !other.failed {
				t.Errorf("%s matched another value", name)
			}
		})
	}
	var reordered fakeT
	JSON(&reordered, file, ba{B: "x", A: 1})
	if !reordered.failed {
		t.Errorf("JSON matched the keys in another order")
	}
}

// fakeT records a failure instead of failing the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.failed = true }

// TestFilled: every field is set, by its own name, however deep.
func TestFilled(t *testing.T) {
	type Inner struct {
		Name  string
		Count int
	}
	type outer struct {
		Inner
		Ptr  *Inner
		List []Inner
		Map  map[string]bool
		Raw  []byte
		On   bool
	}
	v := Filled[outer]()
	if v.Name != "Name" || v.Count == 0 || v.Ptr == nil || *v.Ptr != v.Inner ||
		len(v.List) != 1 || v.List[0] != v.Inner || !v.Map["Map"] || string(v.Raw) != "Raw" || !v.On {
		t.Errorf("%+v", v)
	}
}
