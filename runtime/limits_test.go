package runtime

import (
	"encoding/json"
	"testing"
	"time"
)

// The defaults and the JSON form are pinned: both used to be written out by
// hand, and the table must reproduce them (plus output_file_bytes, which the
// hand-written JSON form dropped).
func TestDefaultLimits(t *testing.T) {
	want := Limits{Timeout: 30 * time.Second, MemoryBytes: 512 << 20, Pids: 128, CPUs: 1,
		WorkdirBytes: 1 << 30, TmpBytes: 256 << 20, StdoutBytes: 1 << 20, StderrBytes: 1 << 20,
		OutputBytes: 512 << 20, OutputFiles: 20000, OutputFileBytes: 256 << 20,
		EgressConnections: 256, EgressBytesOut: 256 << 20}
	if DefaultLimits != want {
		t.Fatalf("DefaultLimits = %+v, want %+v", DefaultLimits, want)
	}
	if got := (Limits{}).WithDefaults(); got != want {
		t.Fatalf("WithDefaults of zero = %+v", got)
	}
}

func TestLimitsJSONForm(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Limits
		want string
	}{
		{"zero", Limits{}, `{}`},
		{"some", Limits{Timeout: 1500 * time.Millisecond, MemoryBytes: 1 << 20, CPUs: 0.5}, `{"timeout_ms":1500,"memory_bytes":1048576,"cpus":0.5}`},
		{"sub-millisecond timeout", Limits{Timeout: 1500 * time.Microsecond, Pids: 3}, `{"timeout_ms":1,"pids":3}`},
		{"defaults", DefaultLimits, `{"timeout_ms":30000,"memory_bytes":536870912,"pids":128,"cpus":1,"workdir_bytes":1073741824,"tmp_bytes":268435456,"stdout_bytes":1048576,"stderr_bytes":1048576,"output_bytes":536870912,"output_files":20000,"output_file_bytes":268435456,"egress_connections":256,"egress_bytes_out":268435456}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.in)
			if err != nil || string(b) != tc.want {
				t.Fatalf("Marshal = %s, %v; want %s", b, err, tc.want)
			}
		})
	}
	var l Limits
	if err := json.Unmarshal([]byte(`{"timeout_ms":"x"}`), &l); err == nil {
		t.Fatal("a string timeout_ms was accepted")
	}
	if err := json.Unmarshal([]byte(`{"timeout_ms":250,"output_file_bytes":7,"unknown":1}`), &l); err != nil ||
		l != (Limits{Timeout: 250 * time.Millisecond, OutputFileBytes: 7}) {
		t.Fatalf("Unmarshal = %+v, %v", l, err)
	}
}

func TestSandboxLimits(t *testing.T) {
	job := Limits{Timeout: time.Second, MemoryBytes: 64 << 20, Pids: 8, OutputFiles: 3}
	sb := job.Sandbox()
	if want := (SandboxLimits{MemoryBytes: 64 << 20, Pids: 8, CPUs: 1, WorkdirBytes: 1 << 30, TmpBytes: 256 << 20}); sb != want {
		t.Fatalf("Sandbox() = %+v, want %+v", sb, want)
	}
	if got := sb.Limits(); got != (Limits{MemoryBytes: 64 << 20, Pids: 8, CPUs: 1, WorkdirBytes: 1 << 30, TmpBytes: 256 << 20}) {
		t.Fatalf("Limits() = %+v", got)
	}
	for _, tc := range []struct {
		name string
		inv  Limits
		fits bool
	}{
		{"same sandbox part, own job part", Limits{Timeout: time.Hour, MemoryBytes: 64 << 20, Pids: 8, StdoutBytes: 9}, true},
		{"defaults written out", Limits{MemoryBytes: 64 << 20, Pids: 8, CPUs: 1, TmpBytes: 256 << 20}, true},
		{"stricter memory", Limits{MemoryBytes: 32 << 20, Pids: 8}, false},
		{"looser pids", Limits{MemoryBytes: 64 << 20, Pids: 9}, false},
		{"other cpus", Limits{MemoryBytes: 64 << 20, Pids: 8, CPUs: 0.5}, false},
		{"other tmpfs", Limits{MemoryBytes: 64 << 20, Pids: 8, WorkdirBytes: 1 << 20}, false},
		{"sandbox part left to the sandbox", Limits{Timeout: time.Hour, StdoutBytes: 9}, true},
		{"part set, part left", Limits{Pids: 8, OutputFiles: 2}, true},
		{"part left, part other", Limits{Pids: 9, OutputFiles: 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Fits(sb.Limits(), tc.inv); got != tc.fits {
				t.Fatalf("Fits = %v, want %v", got, tc.fits)
			}
			// What a pooled sandbox runs: the job's own limits, the
			// sandbox's sandbox-wide ones.
			spec := SandboxSpec{Limits: sb.Limits()}
			got := Job{Sandbox: spec, Invocation: Invocation{Limits: tc.inv}}.Limits()
			want := tc.inv.WithDefaults()
			want.MemoryBytes, want.Pids, want.CPUs, want.WorkdirBytes, want.TmpBytes = sb.MemoryBytes, sb.Pids, sb.CPUs, sb.WorkdirBytes, sb.TmpBytes
			if got != want {
				t.Fatalf("job limits = %+v, want %+v", got, want)
			}
		})
	}
}

// TestLimitsMapIsTheJSONForm: Map has exactly the keys and values
// MarshalJSON writes.
func TestLimitsMapIsTheJSONForm(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Limits
	}{
		{"defaults", DefaultLimits},
		{"partial", Limits{Timeout: 2 * time.Second, CPUs: 0.5, OutputFileBytes: 7}},
		{"sub-millisecond timeout", Limits{Timeout: time.Microsecond, Pids: 3}},
		{"empty", Limits{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(tc.l)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(tc.l.Map())
			if err != nil {
				t.Fatal(err)
			}
			var w, g map[string]any
			json.Unmarshal(want, &w)
			json.Unmarshal(got, &g)
			wb, _ := json.Marshal(w) // both as sorted-key JSON
			gb, _ := json.Marshal(g)
			if string(wb) != string(gb) {
				t.Errorf("Map = %s, MarshalJSON = %s", gb, wb)
			}
		})
	}
}
