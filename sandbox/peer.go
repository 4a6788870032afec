package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Peer identifies the process on the other end of a socket connection, as
// the kernel reported it at connect time (SO_PEERCRED). It cannot be forged
// by the client, which is why sessions, confirmations and the audit log key
// on it rather than on anything a request says.
type Peer struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// PID is the connecting process as seen from the daemon's PID namespace
	// (0 when the peer lives in a namespace the daemon cannot see into).
	PID int32 `json:"pid"`
	// Process is /proc/PID/comm, read once at accept time; informational
	// only (a process can rename itself), empty when unreadable.
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

// ErrNoPeerCredentials is returned by PeerCredentials when the kernel does
// not report credentials for a connection (not a Unix socket, or closed).
var ErrNoPeerCredentials = errors.New("peer credentials unavailable")

// PeerCredentials reads SO_PEERCRED from a Unix socket connection.
func PeerCredentials(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, fmt.Errorf("%w: %T is not a Unix socket", ErrNoPeerCredentials, c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("%w: %v", ErrNoPeerCredentials, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, fmt.Errorf("%w: %v", ErrNoPeerCredentials, err)
	}
	if credErr != nil {
		return Peer{}, fmt.Errorf("%w: %v", ErrNoPeerCredentials, credErr)
	}
	// The kernel reports the overflow ids (65534) or pid 0 for peers in
	// other user/PID namespaces; they are still the kernel's answer, so
	// accept them and let policy decide.
	p := Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}
	if p.PID > 0 {
		p.Process = processName(p.PID)
	}
	return p, nil
}

// processName returns /proc/pid/comm, or "" when it cannot be read.
func processName(pid int32) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
