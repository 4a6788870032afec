package process

import (
	"os"
	"path/filepath"

	"github.com/skillbox/skillbox/runtime/oci"
)

// RuncSpecOptions are the BuildSpec choices of a container that runc runs
// on the host kernel (this backend's, and containerd's with runc as its
// handler): seccomp, a cgroup namespace, no swap and, unless noUserNS, a
// user namespace at userNSBase (oci.DefaultUserNSBase when 0); jobs with
// Network join netNS.
func RuncSpecOptions(netNS string, userNSBase uint32, noUserNS bool) oci.SpecOptions {
	o := oci.SpecOptions{
		Seccomp:      true,
		CgroupNS:     true,
		MaskHostInfo: true,
		SwapLimit:    swapAccounted(),
		NetNS:        netNS,
	}
	if !noUserNS {
		base := userNSBase
		if base == 0 {
			base = oci.DefaultUserNSBase
		}
		o.UserNS = &oci.IDMap{HostUID: base, HostGID: base, Size: oci.UserNSSize}
	}
	return o
}

// RunscSpecOptions are the BuildSpec choices of a gVisor sandbox (this
// backend's, and containerd's with runsc as its handler): no seccomp
// (gVisor filters the sentry itself), no user namespace (runsc already
// runs the sandbox unprivileged in its own one).
func RunscSpecOptions(netNS string) oci.SpecOptions {
	return oci.SpecOptions{NetNS: netNS}
}

// swapAccounted reports whether memory+swap can be limited (cgroup v1 needs
// swap accounting on; v2 has memory.swap.max whenever swap is compiled in).
func swapAccounted() bool {
	if IsCgroup2() {
		return true
	}
	_, err := os.Stat(filepath.Join(CgroupRoot, "memory", "memory.memsw.limit_in_bytes"))
	return err == nil
}
