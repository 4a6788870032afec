//go:build integration

package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// npmInstall installs one small package from the npm registry.
const npmInstall = `const { execSync } = require('child_process');
const fs = require('fs');
fs.mkdirSync('/tmp/proj', { recursive: true });
fs.writeFileSync('/tmp/proj/package.json', '{"name":"p","version":"1.0.0"}');
const env = Object.assign({}, process.env);
if (fs.existsSync('/skill/host-ca.pem')) env.NODE_EXTRA_CA_CERTS = '/skill/host-ca.pem';
try {
  execSync('npm install --no-audit --no-fund --loglevel=error --fetch-retries=0 --fetch-timeout=30000 is-number@7.0.0', { cwd: '/tmp/proj', stdio: 'inherit', env });
  console.log('installed:', require('/tmp/proj/node_modules/is-number/package.json').version);
} catch (e) {
  console.log('install failed');
  process.exit(3);
}
`

// TestRunEgressNpm installs a package with npm through the egress proxy
// with only the npm registry allowed, and fails to without the rule. It
// reaches the public registry, so it runs only when asked:
// SKILLBOX_TEST_NPM_REGISTRY=1.
func TestRunEgressNpm(t *testing.T) {
	if os.Getenv("SKILLBOX_TEST_NPM_REGISTRY") != "1" {
		t.Skip("reaches registry.npmjs.org: set SKILLBOX_TEST_NPM_REGISTRY=1 to run it")
	}
	// Where the host's DNS answers with an address the proxy takes for a
	// non-public one (an intercepting resolver), the rule must name it,
	// as an administrator of such a network would.
	allow := `"registry.npmjs.org:443"`
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", "registry.npmjs.org")
	if err != nil {
		t.Skipf("registry.npmjs.org does not resolve here: %v", err)
	}
	for _, a := range addrs {
		if !a.IsGlobalUnicast() || a.IsPrivate() || strings.HasPrefix(a.String(), "203.0.113.") || strings.HasPrefix(a.String(), "198.18.") || strings.HasPrefix(a.String(), "198.19.") {
			allow += fmt.Sprintf(", %q", netip.PrefixFrom(a, a.BitLen()).String()+":443")
		}
	}
	for _, rt := range []string{"runsc", "runc"} {
		t.Run(rt, func(t *testing.T) {
			runItNeed(t, rt)
			runItNeedImage(t, "node")
			f := newRunFixture(t)
			runItWriteFile(t, filepath.Join(f.root, "npm-user", "SKILL.md"), "---\nname: npm-user\ndescription: Installs a package. Use only in tests.\n---\n# npm-user\n")
			runItWriteFile(t, filepath.Join(f.root, "npm-user", "scripts", "install.js"), npmInstall)
			// A host whose own traffic goes through an intercepting TLS
			// proxy trusts that proxy's CA (NODE_EXTRA_CA_CERTS); the
			// sandbox's npm must too, or nothing verifies.
			if ca := os.Getenv("NODE_EXTRA_CA_CERTS"); ca != "" {
				if b, err := os.ReadFile(ca); err == nil {
					runItWriteFile(t, filepath.Join(f.root, "npm-user", "host-ca.pem"), string(b))
				}
			}
			for _, p := range []string{f.root, filepath.Join(f.root, "npm-user"), filepath.Join(f.root, "npm-user", "scripts")} {
				_ = os.Chmod(p, 0o755)
			}
			for _, tc := range []struct {
				name, egress, want string
				code               int
			}{
				{"allowed", "egress = [" + allow + "]", "installed: 7.0.0", 0},
				{"no rule", ``, "install failed", 3},
			} {
				t.Run(tc.name, func(t *testing.T) {
					cfg := filepath.Join(f.base, "npm-"+tc.name+".hcl")
					runItWriteFile(t, cfg, fmt.Sprintf(`policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
  %s
  limits {
    timeout = "180s"
    memory  = "1GiB"
  }
}
`, tc.egress))
					o := runItExec(t, "run", "--runtime", rt, "--root", f.root, "--config", cfg, "npm-user", "scripts/install.js")
					if o.code != tc.code || !strings.Contains(o.stdout, tc.want) {
						t.Fatalf("npm install (%s):\n%s", tc.name, o)
					}
				})
			}
		})
	}
}
