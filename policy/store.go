package policy

import (
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Where the daemon keeps sessions, confirmations, proposals and shared
// locks: bbolt under state_dir for one machine, or etcd shared
// by the replicas that serve the same hosts.
const (
	StoreBbolt = "bbolt"
	StoreEtcd  = "etcd"
)

var storeNames = []string{StoreBbolt, StoreEtcd}

// EtcdStore is the store "etcd" {} block.
type EtcdStore struct {
	// Endpoints are the etcd members' client URLs.
	Endpoints []string
	// Prefix is the key prefix under which the replicas share their state
	// (default "/skillbox").
	Prefix string
	// CAFile, CertFile and KeyFile configure TLS to etcd.
	CAFile, CertFile, KeyFile string
	Pos                       Pos
}

var storeEtcdSchema = &hcl.BodySchema{Attributes: attrs("endpoints", "prefix", "ca_file", "cert_file", "key_file")}

// store decodes a store "NAME" {} block.
func (d *decoder) store(blk *hcl.Block) {
	if blk.Labels[0] != StoreEtcd {
		d.errorf(blk.LabelRanges[0], "store", "unknown store %q: only store \"etcd\" takes settings (bbolt lives in daemon.state_dir)", blk.Labels[0])
		return
	}
	ec := &d.cfg.Etcd
	ec.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, `store "etcd"`, storeEtcdSchema)
	if a := b.strs("endpoints", &ec.Endpoints); a != nil {
		for _, e := range ec.Endpoints {
			if e == "" || strings.ContainsAny(e, " \t,") {
				b.bad(a, "invalid endpoint %q: use one client URL per list item, like \"http://10.0.0.5:2379\"", e)
			}
		}
	}
	if a := b.str("prefix", &ec.Prefix); a != nil && !strings.HasPrefix(ec.Prefix, "/") {
		b.bad(a, "must start with /, like \"/skillbox\"")
	}
	b.path("ca_file", &ec.CAFile)
	b.path("cert_file", &ec.CertFile)
	b.path("key_file", &ec.KeyFile)
	if (ec.CertFile == "") != (ec.KeyFile == "") {
		d.errorf(blk.DefRange, `store "etcd"`, "cert_file and key_file go together: set both for a client certificate, or neither")
	}
}

// checkStore: daemon.store = "etcd" needs the endpoints of a store "etcd"
// block.
func (d *decoder) checkStore(daemon hcl.Range) {
	if d.cfg.Daemon.Store == StoreEtcd && len(d.cfg.Etcd.Endpoints) == 0 {
		d.errorf(daemon, "daemon.store", "is \"etcd\" but no store \"etcd\" block names its endpoints: add store \"etcd\" { endpoints = [\"http://HOST:2379\"] }")
	}
}
