package kubernetes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

func TestBuildAgent(t *testing.T) {
	base := testLayout(t)
	self, err := os.Executable() // a test binary: static when built with CGO_ENABLED=0
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	interp, err := elfInterpreter(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	a := NewArtifacts(t.TempDir())
	if interp != "" {
		_, err := a.BuildAgent(base, self)
		if !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
			t.Fatalf("a dynamic binary as the agent: %v, want it refused naming CGO_ENABLED=0", err)
		}
		t.Skipf("this test binary is dynamic (%s): the static case needs CGO_ENABLED=0", interp)
	}
	img, err := a.BuildAgent(base, self)
	if err != nil {
		t.Fatal(err)
	}
	m := derivedManifest(t, img)
	top := m.Layers[len(m.Layers)-1]
	entries := layerEntries(t, a.Dir(), top)
	if len(entries) != 3 || entries[2].name != strings.TrimPrefix(AgentPath, "/") || entries[2].mode != 0o755 {
		t.Fatalf("agent layer %v, want the binary at %s after its directories", entryNames(entries), AgentPath)
	}
	again, err := a.BuildAgent(base, self)
	if err != nil || again != img {
		t.Fatalf("second build %+v, %v; want %+v again", again, err, img)
	}
	// Another process (a fresh Artifacts) makes the same bytes.
	other, err := NewArtifacts(t.TempDir()).BuildAgent(base, self)
	if err != nil || other.Digest != img.Digest {
		t.Fatalf("another build: %+v, %v; want digest %s", other, err, img.Digest)
	}
}

func TestBuildAgentRefusals(t *testing.T) {
	base := testLayout(t)
	notELF := filepath.Join(t.TempDir(), "skillbox")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		base   runtime.ImageRef
		binary string
	}{
		{"no layout", runtime.ImageRef{Name: "python", Digest: base.Digest}, notELF},
		{"registry image", runtime.ImageRef{Name: "python", Digest: base.Digest, Ref: "r.example/python:1", Layout: base.Layout}, notELF},
		{"not an ELF binary", base, notELF},
		{"no binary", base, filepath.Join(t.TempDir(), "none")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewArtifacts(t.TempDir()).BuildAgent(tc.base, tc.binary); !errors.Is(err, runtime.ErrUnavailable) {
				t.Fatalf("BuildAgent = %v, want an ErrUnavailable error", err)
			}
		})
	}
}

func entryNames(es []entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.name)
	}
	return out
}
