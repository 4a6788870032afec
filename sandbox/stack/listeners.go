package stack

import (
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/connlimit"
	"github.com/skillbox/skillbox/sandbox/daemon"
	"github.com/skillbox/skillbox/sandbox/jsonrpc"
)

// limitListener caps ln, one of the daemon's HTTP listeners (the console
// and metrics sockets), as the main socket is capped: daemon.max_connections
// in all, daemon.max_connections_per_uid a uid, daemon.approver_connections
// of them kept for approvers. A refused connection is answered 503 and
// closed at once, and audited as refusals on the main socket are. Peers
// without credentials (loopback TCP) share one uid's cap.
func limitListener(ln net.Listener, name string, dc policy.Daemon, d *daemon.Daemon, log hclog.Logger) net.Listener {
	svc := d.Service()
	lim := connlimit.New(connlimit.Limits{Total: dc.MaxConnections, PerUID: dc.MaxConnectionsPerUID, Reserved: dc.ApproverConnections})
	l := connlimit.NewListener(ln, lim, func(c net.Conn) (uint32, bool, bool) {
		p, err := jsonrpc.PeerCredentials(c)
		if err != nil {
			return 0, false, false
		}
		return p.UID, true, svc.IsApprover(p)
	})
	l.Refuse = connlimit.HTTPRefusal
	l.Refused = func(c net.Conn, err *connlimit.RefusedError) {
		p, perr := jsonrpc.PeerCredentials(c)
		if perr != nil {
			p = api.Peer{}
		}
		reason := name + ": " + err.Error()
		log.Debug("connection refused", "peer", p.String(), "reason", reason)
		d.ConnRefused(p, reason)
	}
	return l
}
