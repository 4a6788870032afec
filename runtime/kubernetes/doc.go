// Package kubernetes is the home of skillbox's kubernetes runtime backend
// (issue 27): runs as Pods under the RuntimeClass gvisor, so that skillbox
// can scale beyond one machine without giving up gVisor.
//
// The backend comes next. For now the package holds the integration test
// that starts the single-node test cluster of hack/kube.sh and proves that a
// Pod of RuntimeClass gvisor runs on gVisor's kernel: the cluster the
// backend's tests will run against.
package kubernetes
