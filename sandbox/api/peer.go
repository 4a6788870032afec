package api

import (
	"encoding/json"
	"fmt"
)

// Peer is the caller: the process on the other end of the connection as the
// kernel reported it (SO_PEERCRED), or the user running the CLI. Sessions,
// confirmations and the audit log key on it, never on anything a request
// says.
type Peer struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// PID is the calling process as seen from skillbox's PID namespace (0
	// when it lives in a namespace skillbox cannot see into).
	PID int32 `json:"pid"`
	// Process is /proc/PID/comm, read once when the connection was
	// accepted. The calling process chose it (a process can name itself
	// anything, "approver" included), so it is encoded as
	// "process_claimed": never key a decision on it.
	Process string `json:"process_claimed,omitempty"`
}

// UnmarshalJSON also reads "process", the name records written before
// the field was marked as claimed use.
func (p *Peer) UnmarshalJSON(b []byte) error {
	type plain Peer
	var v struct {
		plain
		Old string `json:"process,omitempty"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = Peer(v.plain)
	if p.Process == "" {
		p.Process = v.Old
	}
	return nil
}

// String formats the peer for logs and messages: "uid=1000 gid=1000 pid=42 (python3)".
func (p Peer) String() string {
	s := fmt.Sprintf("uid=%d gid=%d pid=%d", p.UID, p.GID, p.PID)
	if p.Process != "" {
		s += " (" + p.Process + ")"
	}
	return s
}
