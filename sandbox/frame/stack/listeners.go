package stack

import (
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/connlimit"
	"github.com/skillbox/skillbox/sandbox/doors/daemon"
	"github.com/skillbox/skillbox/sandbox/doors/jsonrpc"
)

// limitListener caps ln, one of the daemon's HTTP listeners (the console
// and metrics sockets), as the main socket is capped: daemon.max_connections
// in all, daemon.max_connections_per_uid a uid, daemon.approver_connections
// of them kept for approvers. A refused connection is answered 503 and
// closed at once, and audited as refusals on the main socket are. Peers
// without credentials (loopback TCP) share one uid's cap.
func limitListener(ln net.Listener, name string, dc policy.Daemon, d *daemon.Daemon, log hclog.Logger) net.Listener {
	lim := connlimit.New(connlimit.Limits{Total: dc.MaxConnections, PerUID: dc.MaxConnectionsPerUID, Reserved: dc.ApproverConnections})
	l := connlimit.NewListener(ln, lim, func(c net.Conn) (uint32, bool) {
		p, err := jsonrpc.PeerIDs(c)
		return p.UID, err == nil
	})
	l.Privileged = approverCache(d.Service().IsApprover)
	l.Refuse = connlimit.HTTPRefusal
	l.Refused = func(c net.Conn, err *connlimit.RefusedError) {
		p, perr := jsonrpc.PeerIDs(c)
		if perr != nil {
			p = api.Peer{}
		}
		reason := name + ": " + err.Error()
		log.Debug("connection refused", "peer", p.String(), "reason", reason)
		d.ConnRefused(p, reason)
	}
	return l
}

// approverCache remembers for a few seconds whether a uid is an approver
// (the answer looks the uid's name up), so that a flood of refused
// connections from one uid costs one lookup, not one each. It holds at
// most a few hundred uids.
func approverCache(isApprover func(api.Peer) bool) func(uid uint32) bool {
	const ttl, most = 5 * time.Second, 256
	type answer struct {
		yes bool
		at  time.Time
	}
	var (
		mu   sync.Mutex
		seen = map[uint32]answer{}
	)
	return func(uid uint32) bool {
		now := time.Now()
		mu.Lock()
		a, ok := seen[uid]
		mu.Unlock()
		if ok && now.Sub(a.at) < ttl {
			return a.yes
		}
		yes := isApprover(api.Peer{UID: uid})
		mu.Lock()
		if len(seen) >= most {
			clear(seen)
		}
		seen[uid] = answer{yes, now}
		mu.Unlock()
		return yes
	}
}
