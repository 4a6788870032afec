package stack

import (
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/core/store"
)

// openState opens the KV the stores run on: with daemonStore the daemon's
// choice (daemon.store), else bbolt in dir. A daemon whose etcd does
// not answer does not start: replicas must not each keep state of their
// own that the others cannot see.
func openState(cfg *policy.Config, daemonStore bool, dir string, log hclog.Logger) (store.KV, error) {
	if !daemonStore || cfg.Daemon.Store != policy.StoreEtcd {
		return store.OpenStateDB(dir)
	}
	e := cfg.Etcd
	kv, err := store.OpenEtcd(store.EtcdOptions{Endpoints: e.Endpoints, Prefix: e.Prefix, CAFile: e.CAFile, CertFile: e.CertFile, KeyFile: e.KeyFile})
	if err != nil {
		return nil, fmt.Errorf("daemon.store = \"etcd\" (%s): %w", e.Pos, err)
	}
	log.Info("state shared through etcd", "endpoints", e.Endpoints, "prefix", e.Prefix)
	return kv, nil
}
