package runtime

import (
	"path/filepath"
	"strings"
)

// The gVisor skillbox runs by default is pinned: built from the Go module
// proxy at one version by hack/install-runsc.sh (which checks the module's
// hash and stamps this version into the binary) and installed at a fixed
// path. A distribution's runsc stays usable by naming its binary in the
// config (runtime "runsc" { binary = "/usr/bin/runsc" }); skillbox never
// falls back to it by itself.
const (
	// PinnedRunscVersion is what `runsc --version` of the pinned build says.
	PinnedRunscVersion = "release-20260905.0+160fafc42237"
	// PinnedRunscDir holds one directory per installed pinned version.
	PinnedRunscDir = "/usr/local/lib/skillbox/runsc"
	// RunscInstallCommand installs the pinned runsc (as root, from a
	// skillbox source tree).
	RunscInstallCommand = "hack/install-runsc.sh"
	// PinnedRunscPlatform is the platform the pinned runsc runs with:
	// systrap needs no hardware virtualisation (KVM hangs in many VMs)
	// and is faster than ptrace.
	PinnedRunscPlatform = "systrap"
)

// PinnedRunscPath is where hack/install-runsc.sh installs the pinned runsc.
func PinnedRunscPath() string {
	return filepath.Join(PinnedRunscDir, PinnedRunscVersion, "runsc")
}

// RunscStateDir is the default --root for a runsc binary: one per runsc
// version, since versions do not read each other's state, so the pinned
// build gets its own and any other binary /run/skillbox/runsc.
func RunscStateDir(binary string) string {
	if IsPinnedRunsc(binary) {
		return filepath.Join(DefaultStateBase, "runsc-"+PinnedRunscVersion)
	}
	return filepath.Join(DefaultStateBase, "runsc")
}

func IsPinnedRunsc(binary string) bool {
	return binary == "" || filepath.Clean(binary) == PinnedRunscPath()
}

// RunscInstallHint is how to get the runsc binary configured.
func RunscInstallHint(binary string) string {
	if IsPinnedRunsc(binary) {
		return RunscInstallCommand + " (as root, from the skillbox source tree; it builds gVisor " + PinnedRunscVersion + " from the Go module proxy), or set runtime \"runsc\" { binary = ... } to another runsc"
	}
	if strings.HasPrefix(binary, "/usr/bin/") || !strings.Contains(binary, "/") {
		return "apt-get install runsc"
	}
	return "install runsc at " + binary + " or change runtime \"runsc\" { binary = ... }"
}
