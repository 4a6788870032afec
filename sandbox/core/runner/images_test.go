package runner_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
)

// fakePuller is a runner.RegistryPuller whose EnsureImage is a function.
type fakePuller struct {
	EnsureImageFunc func(ctx context.Context, ref string) (string, error)
}

func (f *fakePuller) EnsureImage(ctx context.Context, ref string) (string, error) {
	return f.EnsureImageFunc(ctx, ref)
}

var _ runner.RegistryPuller = (*fakePuller)(nil)

// A registry image comes from the puller, without a rootfs on the host;
// without a puller (a runtime other than containerd) it is unavailable,
// and a failed pull passes its error on.
func TestStoreImagesRegistry(t *testing.T) {
	const ref = "registry.example.com/stats/r-base:4.4"
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	pullErr := errors.New("registry unreachable")
	tests := []struct {
		name    string
		puller  runner.RegistryPuller
		want    runtime.ImageRef
		wantErr []string
	}{
		{"no puller", nil, runtime.ImageRef{}, []string{`image "r" is the registry image ` + ref, "only the containerd runtime"}},
		{"pulled", &fakePuller{EnsureImageFunc: func(_ context.Context, r string) (string, error) {
			if r != ref {
				t.Errorf("pulled %q", r)
			}
			return digest, nil
		}}, runtime.ImageRef{Name: "r", Digest: digest, Ref: ref}, nil},
		{"pull fails", &fakePuller{EnsureImageFunc: func(context.Context, string) (string, error) { return "", pullErr }},
			runtime.ImageRef{}, []string{"registry unreachable"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			si := &runner.StoreImages{Registry: map[string]string{"r": ref}, Puller: tc.puller}
			got, rootfs, err := si.Ensure(context.Background(), "r", nil)
			if tc.wantErr == nil {
				if err != nil || got != tc.want || rootfs != "" {
					t.Fatalf("Ensure = %+v, %q, %v; want %+v, no rootfs", got, rootfs, err, tc.want)
				}
				if err := si.Available("r"); err != nil {
					t.Errorf("Available: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Ensure = %+v, want an error", got)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.puller == nil && (!errors.Is(err, api.ErrUnavailable) || si.Available("r") == nil || si.Built("r") == nil) {
				t.Errorf("a registry image without a puller must be unavailable everywhere: %v", err)
			}
		})
	}
}
