package ocicli

import (
	"slices"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
)

// Under runc (MaskHostInfo) the host's kernel command line,
// modules, symbols and disks are masked; runsc shows its own.
func TestRuncMasksHostInfo(t *testing.T) {
	for _, mask := range []bool{true, false} {
		s, err := oci.BuildSpec(goldenJob(), oci.SpecOptions{WorkdirSource: "/w", HostsSource: "/h", MaskHostInfo: mask})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range oci.HostInfoPaths {
			if got := slices.Contains(s.Linux.MaskedPaths, p); got != mask {
				t.Errorf("MaskHostInfo %v: %s masked %v", mask, p, got)
			}
		}
	}
	r, err := NewRunc(runtime.Options{})
	if err != nil {
		t.Skip(err)
	}
	if !r.specOptions(goldenJob()).MaskHostInfo {
		t.Error("runc does not mask host information")
	}
}
