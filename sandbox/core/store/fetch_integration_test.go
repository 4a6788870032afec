//go:build integration

package store

// fetchEtcd: integration tests fetch etcd (hack/kube.sh etcd-bin) when the
// machine has none, so the etcd backend is always tested.
const fetchEtcd = true
