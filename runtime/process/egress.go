package process

import (
	"context"
	"os"
	"path/filepath"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
)

// StartEgress starts the egress plumbing of a sandbox whose spec has
// Egress (its caps from the spec's limits, EgressConfig; the image's CA roots for a run
// with secrets), writing its files into dir, and fills in what the OCI
// spec needs in opts. Every backend that supports egress calls it at
// Create and closes the result at Destroy.
func StartEgress(ctx context.Context, spec runtime.SandboxSpec, dir string, opts *oci.SpecOptions) (*egress.Egress, error) {
	cfg := spec.EgressConfig()
	if len(cfg.Secrets) > 0 && spec.RootFS != "" {
		// The image's own roots go into the bundle the sandbox trusts (a
		// registry image's are not on the host: only skillbox's CA then).
		sys := filepath.Join(spec.RootFS, "etc", "ssl", "certs", "ca-certificates.crt")
		if st, err := os.Lstat(sys); err == nil && st.Mode().IsRegular() {
			cfg.SystemBundle = sys
		}
	}
	eg, err := egress.Start(ctx, spec.ID, dir, cfg)
	if err != nil {
		return nil, errkind.Wrap(runtime.ErrUnavailable, err)
	}
	opts.NetNS, opts.ResolvConfSource, opts.EgressEnv = eg.NetNS(), eg.ResolvConf(), eg.Env()
	opts.CABundleSource = eg.CABundle()
	return eg, nil
}
