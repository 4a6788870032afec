package api

import "fmt"

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
	// accepted; informational only (a process can rename itself).
	Process string `json:"process,omitempty"`
}

// String formats the peer for logs and messages: "uid=1000 gid=1000 pid=42 (python3)".
func (p Peer) String() string {
	s := fmt.Sprintf("uid=%d gid=%d pid=%d", p.UID, p.GID, p.PID)
	if p.Process != "" {
		s += " (" + p.Process + ")"
	}
	return s
}
