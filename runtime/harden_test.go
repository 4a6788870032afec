package runtime

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// Finding 7: output names with escape sequences or newlines never reach
// results or logs raw.
func TestOutputNamesWithControlCharacters(t *testing.T) {
	wd := t.TempDir()
	for _, n := range []string{"ok.txt", "a\nb.txt", "\x1b[31mred.txt", "tab\there.txt"} {
		if err := os.WriteFile(filepath.Join(wd, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := collect(t, wd, DefaultLimits)
	for _, f := range o.Files {
		if strings.IndexFunc(f.Path, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Errorf("output path %q holds control characters", f.Path)
		}
	}
	for _, s := range o.Skipped {
		if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Errorf("skipped entry %q holds control characters", s)
		}
	}
	if len(o.Files) != 1 || len(o.Skipped) != 3 {
		t.Errorf("files %v skipped %q: want ok.txt collected and the three others named as skipped", o.Files, o.Skipped)
	}
}

// Which reason a run gets from what the engine saw and the cgroup's
// counters (finalReason's precedence). Issue 22: a fork bomb is "pids"
// whenever pids.max refused a fork, also when memory ran out first (the
// kernel OOM-killed some of its copies) or the timer or the output cap
// stopped it; a timeout or an OOM kill without a refused fork keeps its own
// name; the caller's cancel is what it is.
func TestReasonByWhatTriggered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason Reason
		ev     cgroupEvents
		want   Reason
	}{
		{"exit", ReasonExit, cgroupEvents{}, ReasonExit},
		{"ended after a refused fork", ReasonExit, cgroupEvents{PidsMax: 3}, ReasonPids},
		{"ended after an OOM kill", ReasonExit, cgroupEvents{OOMKills: 1}, ReasonOOM},
		{"memory ran out before pids", ReasonExit, cgroupEvents{OOMKills: 2, PidsMax: 1, MemFail: 40}, ReasonPids},
		{"fork bomb stopped by the timer", ReasonTimeout, cgroupEvents{PidsMax: 100}, ReasonPids},
		{"fork bomb stopped by the timer after OOM kills", ReasonTimeout, cgroupEvents{PidsMax: 100, OOMKills: 3}, ReasonPids},
		{"fork bomb stopped by the output cap", ReasonOutputCap, cgroupEvents{PidsMax: 1}, ReasonPids},
		{"fork bomb stopped by the egress cap", ReasonEgressCap, cgroupEvents{PidsMax: 1}, ReasonPids},
		{"timeout without a refused fork", ReasonTimeout, cgroupEvents{}, ReasonTimeout},
		{"timeout after an OOM kill", ReasonTimeout, cgroupEvents{OOMKills: 1}, ReasonTimeout},
		{"output cap after an OOM kill", ReasonOutputCap, cgroupEvents{OOMKills: 1}, ReasonOutputCap},
		{"caller killed a run that hit memory", ReasonKilled, cgroupEvents{OOMKills: 1}, ReasonKilled},
		{"caller killed a fork bomb", ReasonKilled, cgroupEvents{PidsMax: 5}, ReasonKilled},
		{"caller cancelled a fork bomb", ReasonCancelled, cgroupEvents{PidsMax: 5}, ReasonCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := finalReason(tc.reason, tc.ev); got != tc.want {
				t.Errorf("finalReason(%s, %+v) = %s, want %s", tc.reason, tc.ev, got, tc.want)
			}
		})
	}
}

// FuzzOutputName: whatever a script names a file, what results and logs
// carry is printable and bounded.
func FuzzOutputName(f *testing.F) {
	for _, s := range []string{"ok.txt", "a\nb", "\x1b[31mred", "\xff\xfe", strings.Repeat("n", 600)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		r := reportName(name)
		if strings.IndexFunc(r, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0 {
			t.Fatalf("reportName(%q) = %q holds unprintable characters", name, r)
		}
		if len(r) > 4*maxNameReported+16 {
			t.Fatalf("reportName of %d bytes gave %d bytes", len(name), len(r))
		}
		if printableName(name) && reportName(name) != name && len(name) <= maxNameReported {
			t.Fatalf("a printable short name was changed: %q → %q", name, r)
		}
	})
}

// Finding 7: under runc (MaskHostInfo) the host's kernel command line,
// modules, symbols and disks are masked; runsc shows its own.
func TestRuncMasksHostInfo(t *testing.T) {
	for _, mask := range []bool{true, false} {
		s, err := BuildSpec(goldenJob(), SpecOptions{WorkdirSource: "/w", HostsSource: "/h", MaskHostInfo: mask})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range hostInfoPaths {
			if got := slices.Contains(s.Linux.MaskedPaths, p); got != mask {
				t.Errorf("MaskHostInfo %v: %s masked %v", mask, p, got)
			}
		}
	}
	r, err := NewRunc(Options{})
	if err != nil {
		t.Skip(err)
	}
	if !r.specOptions(goldenJob()).MaskHostInfo {
		t.Error("runc does not mask host information")
	}
}
