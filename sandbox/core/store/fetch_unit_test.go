//go:build !integration

package store

// fetchEtcd: unit tests use an etcd already on the machine, and skip the
// etcd backend without one.
const fetchEtcd = false
