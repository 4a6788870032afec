// Package store keeps the daemon's persistent state: sessions (which skills
// a conversation has loaded), confirmations (approvals bound to one run's
// digest) and proposals. It knows nothing of transports or policy: the
// service decides, the store remembers, and a restart of the daemon loses
// none of it. The stores run on a KV: bbolt (<state_dir>/state.db) for one
// daemon, or etcd shared by replicas serving the same hosts, where every
// change is a compare-and-swap, so an approval is used once across them.
package store
