package jsonrpc

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// ErrNoPeerCredentials is returned by PeerCredentials when the kernel does
// not report credentials for a connection (not a Unix socket, or closed).
var ErrNoPeerCredentials = errors.New("peer credentials unavailable")

// PeerCredentials reads SO_PEERCRED from a Unix socket connection: the
// caller's identity, which it cannot forge. A connection that wraps
// another (NetConn) is read through.
func PeerCredentials(c net.Conn) (api.Peer, error) {
	p, err := PeerIDs(c)
	if err == nil && p.PID > 0 {
		p.Process = processName(p.PID)
	}
	return p, err
}

// PeerIDs is PeerCredentials without the process name: the kernel's uid,
// gid and pid only, one getsockopt, cheap enough for an accept loop.
func PeerIDs(c net.Conn) (api.Peer, error) {
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn() // a counted connection (connlimit.Listener)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return api.Peer{}, errkind.Errorf(ErrNoPeerCredentials, "%T is not a Unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return api.Peer{}, errkind.Wrap(ErrNoPeerCredentials, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return api.Peer{}, errkind.Wrap(ErrNoPeerCredentials, err)
	}
	if credErr != nil {
		return api.Peer{}, errkind.Wrap(ErrNoPeerCredentials, credErr)
	}
	// The kernel reports the overflow ids (65534) or pid 0 for peers in
	// other user/PID namespaces; they are still the kernel's answer, so
	// accept them and let policy decide.
	return api.Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}

// processName returns /proc/pid/comm, or "" when it cannot be read.
func processName(pid int32) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
