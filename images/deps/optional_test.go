package deps

import (
	"archive/zip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// optionalPip is a host "python3" whose pip download fails like pip when
// the requirements name a package in missing (the first, in file order:
// "No matching distribution"), then when they name conflicty (a
// resolution failure), and
// otherwise copies a wheel of each requirement into --dest. Each call's
// requirements are appended to the returned log.
func optionalPip(t *testing.T, missing ...string) (python, log string) {
	t.Helper()
	dir := t.TempDir()
	wheels := filepath.Join(dir, "wheels")
	os.MkdirAll(wheels, 0o755)
	for _, n := range []string{"ownpkg", "python-pptx", "pdfplumber", "conflicty"} {
		f, err := os.Create(filepath.Join(wheels, strings.ReplaceAll(n, "-", "_")+"-1.0-py3-none-any.whl"))
		if err != nil {
			t.Fatal(err)
		}
		zw := zip.NewWriter(f)
		w, _ := zw.Create(strings.ReplaceAll(n, "-", "_") + "/__init__.py")
		w.Write([]byte("# " + n + "\n"))
		zw.Close()
		f.Close()
	}
	log = filepath.Join(dir, "log")
	python = filepath.Join(dir, "python3")
	script := fmt.Sprintf(`#!/bin/sh
dest=; req=
while [ $# -gt 0 ]; do
  case "$1" in --dest) dest=$2; shift;; -r) req=$2; shift;; esac
  shift
done
tr '\n' ' ' < "$req" >> %[1]q; echo >> %[1]q
while read -r line; do
  n=${line%%%%=*}
  case " %[2]s " in *" $n "*) echo "ERROR: No matching distribution found for $line"; exit 1;; esac
done < "$req"
if grep -q '^conflicty' "$req"; then echo "ERROR: ResolutionImpossible: conflicting dependencies"; exit 1; fi
while read -r line; do
  n=$(echo "${line%%%%=*}" | tr - _)
  cp %[3]q/"$n"-1.0-py3-none-any.whl "$dest/"
done < "$req"
`, log, strings.Join(missing, " "), wheels)
	if err := os.WriteFile(python, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return python, log
}

func TestBuildOptional(t *testing.T) {
	req := func(names ...string) []Requirement {
		var out []Requirement
		for _, n := range names {
			out = append(out, Requirement{Name: n, Spec: n + "==1.0", Source: "requirements.txt:1"})
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		own       []string
		extras    []string
		missing   []string
		wantLayer []string // the layer's packages; nil: no layer
		wantLeft  []LeftOut
		wantErr   string
		attempts  int
	}{
		{name: "the source has every extra", own: []string{"ownpkg"}, extras: []string{"python-pptx", "pdfplumber"},
			wantLayer: []string{"ownpkg", "python-pptx", "pdfplumber"}, attempts: 1},
		{name: "the source has no extra: the skill's layer builds without them", own: []string{"ownpkg"}, extras: []string{"python-pptx", "pdfplumber"},
			missing: []string{"python-pptx", "pdfplumber"}, wantLayer: []string{"ownpkg"}, attempts: 3, wantLeft: []LeftOut{
				{Name: "python-pptx", Why: "the configured python_index has no wheel of it", NoWheel: true},
				{Name: "pdfplumber", Why: "the configured python_index has no wheel of it", NoWheel: true}}},
		{name: "one extra missing: the others stay", own: []string{"ownpkg"}, extras: []string{"python-pptx", "pdfplumber"},
			missing: []string{"pdfplumber"}, wantLayer: []string{"ownpkg", "python-pptx"}, attempts: 2, wantLeft: []LeftOut{
				{Name: "pdfplumber", Why: "the configured python_index has no wheel of it", NoWheel: true}}},
		{name: "a layer that fails with the extras builds without them", own: []string{"ownpkg"}, extras: []string{"conflicty", "python-pptx"},
			wantLayer: []string{"ownpkg"}, attempts: 2, wantLeft: []LeftOut{{Name: "conflicty"}, {Name: "python-pptx"}}},
		{name: "the skill's own package missing fails it", own: []string{"ownpkg"}, extras: []string{"python-pptx"},
			missing: []string{"ownpkg"}, wantErr: "no wheel of ownpkg", attempts: 1},
		{name: "the skill's own failure after the extras went", own: []string{"conflicty"}, extras: []string{"pdfplumber", "python-pptx"},
			missing: []string{"pdfplumber"}, wantErr: "ResolutionImpossible", attempts: 3, wantLeft: []LeftOut{
				{Name: "pdfplumber", Why: "the configured python_index has no wheel of it", NoWheel: true}}},
		{name: "extras alone, none served: no layer", extras: []string{"python-pptx", "pdfplumber"},
			missing: []string{"python-pptx", "pdfplumber"}, attempts: 2, wantLeft: []LeftOut{
				{Name: "python-pptx", Why: "the configured python_index has no wheel of it", NoWheel: true},
				{Name: "pdfplumber", Why: "the configured python_index has no wheel of it", NoWheel: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			py, log := optionalPip(t, tc.missing...)
			b := &Builder{Store: OpenStore(t.TempDir()), Runtime: &fakeRuntime{}, Sources: Sources{FindLinks: []string{t.TempDir()}}, HostPython: py}
			r := Request{Image: "python", ImageDigest: "sha256:" + strings.Repeat("b", 64), RootFS: pythonRootFS(t),
				Set: &Set{Python: req(tc.own...)}, Skill: "extras-skill"}
			tries := 0
			l, left, err := b.BuildOptional(context.Background(), r, req(tc.extras...), func(Request, []LeftOut, *Layer, error) { tries++ })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			var got []string
			if l != nil {
				for _, p := range l.Python {
					got = append(got, p.Name)
				}
			}
			if !slices.Equal(got, tc.wantLayer) {
				t.Errorf("layer %v, want %v", got, tc.wantLayer)
			}
			for i := range left {
				if !left[i].NoWheel {
					if !strings.Contains(left[i].Why, "ResolutionImpossible") {
						t.Errorf("left %q: why %q does not give the build's error", left[i].Name, left[i].Why)
					}
					left[i].Why = ""
				}
			}
			if !slices.Equal(left, tc.wantLeft) {
				t.Errorf("left %+v, want %+v", left, tc.wantLeft)
			}
			if tries != tc.attempts {
				data, _ := os.ReadFile(log)
				t.Errorf("%d builds tried, want %d; pip saw:\n%s", tries, tc.attempts, data)
			}
			var nw *NoWheelError
			if strings.Contains(tc.wantErr, "no wheel") && !errors.As(err, &nw) {
				t.Errorf("%v is no NoWheelError", err)
			}
		})
	}
}

// What a source has no wheel of is remembered in the store: the next build
// (another process: a one-shot skillbox run) does not ask pip again until
// UnservedTTL has passed, and another source is asked.
func TestBuildOptionalRemembersUnserved(t *testing.T) {
	py, _ := optionalPip(t, "python-pptx")
	store := OpenStore(t.TempDir())
	img := "sha256:" + strings.Repeat("c", 64)
	r := Request{Image: "python", ImageDigest: img, RootFS: pythonRootFS(t),
		Set: &Set{Python: []Requirement{{Name: "ownpkg", Spec: "ownpkg==1.0", Source: "requirements.txt:1"}}}, Skill: "s"}
	extras := []Requirement{{Name: "python-pptx", Spec: "python-pptx==1.0"}, {Name: "pdfplumber", Spec: "pdfplumber==1.0"}}
	build := func(src Sources) (int, []LeftOut) {
		t.Helper()
		b := &Builder{Store: store, Runtime: &fakeRuntime{}, Sources: src, HostPython: py}
		tries := 0
		l, left, err := b.BuildOptional(context.Background(), r, extras, func(Request, []LeftOut, *Layer, error) { tries++ })
		if err != nil || l == nil {
			t.Fatalf("build: %v, %v", l, err)
		}
		return tries, left
	}
	src := Sources{FindLinks: []string{"/wheels/a"}}
	if n, left := build(src); n != 2 || len(left) != 1 || left[0].Name != "python-pptx" {
		t.Fatalf("first build: %d tries, left %+v", n, left)
	}
	if got := store.Unserved(img, src.ID()); got["python-pptx"] == "" {
		t.Fatalf("the store does not remember python-pptx: %v", got)
	}
	if n, left := build(src); n != 1 || len(left) != 1 || left[0].Name != "python-pptx" || !left[0].NoWheel {
		t.Errorf("second build: %d tries (want 1: the layer without python-pptx), left %+v", n, left)
	}
	if n, _ := build(Sources{FindLinks: []string{"/wheels/b"}}); n != 2 {
		t.Errorf("another source: %d tries, want 2 (asked again)", n)
	}
	// Expired entries are asked for again.
	if err := store.MarkUnserved(img, "other", "x", "why"); err != nil {
		t.Fatal(err)
	}
	all := store.readUnserved()
	for k, m := range all {
		for n, e := range m {
			e.At = e.At.Add(-UnservedTTL - time.Minute)
			all[k][n] = e
		}
	}
	b, _ := json.Marshal(all)
	os.WriteFile(filepath.Join(store.Dir(), unservedFile), b, 0o644)
	if got := store.Unserved(img, src.ID()); len(got) != 0 {
		t.Errorf("expired entries still count: %v", got)
	}
}
