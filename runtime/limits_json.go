package runtime

import (
	"encoding/json"
	"time"
)

// limitsJSON is Limits as written (audit records, `skillbox run --json`):
// the timeout in milliseconds, which is what people read, and zero values
// omitted.
type limitsJSON struct {
	TimeoutMS    int64   `json:"timeout_ms,omitempty"`
	MemoryBytes  int64   `json:"memory_bytes,omitempty"`
	Pids         int64   `json:"pids,omitempty"`
	CPUs         float64 `json:"cpus,omitempty"`
	WorkdirBytes int64   `json:"workdir_bytes,omitempty"`
	TmpBytes     int64   `json:"tmp_bytes,omitempty"`
	StdoutBytes  int64   `json:"stdout_bytes,omitempty"`
	StderrBytes  int64   `json:"stderr_bytes,omitempty"`
	OutputBytes  int64   `json:"output_bytes,omitempty"`
	OutputFiles  int     `json:"output_files,omitempty"`
	EgressConns  int     `json:"egress_connections,omitempty"`
	EgressOut    int64   `json:"egress_bytes_out,omitempty"`
}

// MarshalJSON writes the timeout as timeout_ms.
func (l Limits) MarshalJSON() ([]byte, error) {
	return json.Marshal(limitsJSON{
		TimeoutMS: l.Timeout.Milliseconds(), MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUs: l.CPUs,
		WorkdirBytes: l.WorkdirBytes, TmpBytes: l.TmpBytes, StdoutBytes: l.StdoutBytes,
		StderrBytes: l.StderrBytes, OutputBytes: l.OutputBytes, OutputFiles: l.OutputFiles,
		EgressConns: l.EgressConnections, EgressOut: l.EgressBytesOut,
	})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (l *Limits) UnmarshalJSON(b []byte) error {
	var j limitsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = Limits{
		Timeout: time.Duration(j.TimeoutMS) * time.Millisecond, MemoryBytes: j.MemoryBytes, Pids: j.Pids, CPUs: j.CPUs,
		WorkdirBytes: j.WorkdirBytes, TmpBytes: j.TmpBytes, StdoutBytes: j.StdoutBytes,
		StderrBytes: j.StderrBytes, OutputBytes: j.OutputBytes, OutputFiles: j.OutputFiles,
		EgressConnections: j.EgressConns, EgressBytesOut: j.EgressOut,
	}
	return nil
}
