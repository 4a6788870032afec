// Package store is the daemon's persistent state: sessions (which skills a
// conversation has loaded, owned by a uid, expiring), confirmations
// (approvals bound to one run's digest, single-use, expiring) and proposals.
// It knows nothing of transports or policy: the service decides, the store
// remembers, and a restart of the daemon loses none of it.
//
// The stores run on a KV whose every change is a compare-and-swap: bbolt
// (StateDB, <state_dir>/state.db) for one daemon, or etcd (EtcdKV) shared by
// replicas serving the same hosts, so a session made on one replica is used
// on another and an approval consumed on one is refused on every other. Its
// Locker (a mutex in process, an etcd lease-backed mutex across replicas)
// serialises what must not run twice at once.
package store
