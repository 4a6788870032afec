package runtime

import (
	"reflect"
	"strings"
	"testing"
)

type testOptions struct {
	Binary string
	Flags  []string
}

func decodeTestOptions(s Settings) (testOptions, error) {
	var o testOptions
	err := s.Decode(map[string]any{"binary": &o.Binary, "flags": &o.Flags})
	return o, err
}

// A backend's own options come from its typed value or from its block's
// settings, never both; a setting it does not have is an error naming it.
func TestBackendOptions(t *testing.T) {
	got, err := BackendOptions("x", Options{Settings: Settings{"binary": "/b", "flags": []string{"--debug"}}}, decodeTestOptions)
	if err != nil || !reflect.DeepEqual(got, testOptions{Binary: "/b", Flags: []string{"--debug"}}) {
		t.Errorf("from settings: %+v, %v", got, err)
	}
	if got, err := BackendOptions("x", Options{Backend: testOptions{Binary: "/t"}}, decodeTestOptions); err != nil || got.Binary != "/t" {
		t.Errorf("typed: %+v, %v", got, err)
	}
	if got, err := BackendOptions("x", Options{Backend: &testOptions{Binary: "/p"}}, decodeTestOptions); err != nil || got.Binary != "/p" {
		t.Errorf("pointer: %+v, %v", got, err)
	}
	if got, err := BackendOptions("x", Options{}, decodeTestOptions); err != nil || !reflect.DeepEqual(got, testOptions{}) {
		t.Errorf("none: %+v, %v", got, err)
	}
	for name, o := range map[string]Options{
		"both":         {Settings: Settings{"binary": "/b"}, Backend: testOptions{}},
		"another type": {Backend: 3},
		"unknown":      {Settings: Settings{"address": "/s"}},
		"wrong kind":   {Settings: Settings{"flags": "--debug"}},
		"wrong kind 2": {Settings: Settings{"binary": []string{"/b"}}},
	} {
		if _, err := BackendOptions("x", o, decodeTestOptions); err == nil || !strings.HasPrefix(err.Error(), "runtime x: ") {
			t.Errorf("%s: error %v", name, err)
		}
	}
}
