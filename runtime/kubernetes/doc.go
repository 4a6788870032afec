// Package kubernetes is skillbox's kubernetes runtime backend:
// a run is a Pod under the RuntimeClass gvisor, so that skillbox can scale
// beyond one machine without giving up gVisor.
//
// The pod carries the confinement the local backends give a sandbox
// (podSpec: no service-account token, nobody on a read-only root with no
// capabilities, the runtime's seccomp profile, resources and deadline from
// the run's limits, memory-backed /work and /tmp), and runs its image by
// digest, so that a node runs exactly the approved bytes: skillbox's own
// images reach the nodes as OCI archives named by their digest reference
// (WriteImageArchive), or through the registry of the backend's options,
// which skillbox pushes them to. A run's skill files and dependency layer
// are content-addressed artifacts too: one derived image per interpreter
// image, skill and layer digests (artifact.go), pulled by digest.
// Its container only holds the pod open. The job
// goes in and its outputs come out as tar streams over exec through the
// API server (io.go), never as exec arguments, which audit logs and
// proxies keep: one exec unpacks the job's frame (environment and argv)
// and input files, one runs the job (stdin in; stdout and stderr back at
// the job's caps), one stops what it left running, and one streams /work
// back to be collected by runtime/oci's rules. The pod is deleted when the
// run ends; a timeout, an output cap or a cancel stops the job first so
// that its outputs are still read, as the local backends read them.
//
// Runs go through the lifecycle (lifecycle.go), so the local pool keeps
// Ready pods per (image, skill digest, dependency layer) and a claim
// never waits on the scheduler. Pods carry this instance's and their
// owner's labels, and Sweep deletes those a dead process left (sweep.go).
// A run with egress rules reaches the network only through an egress proxy
// of its own that the daemon serves, and a NetworkPolicy of its own lets
// its pod reach that proxy and nothing else (egress.go). Still to come:
// session sandboxes, an open network and egress secrets. Jobs that need
// them are refused with runtime.ErrUnavailable rather than run without
// them.
//
// The package's integration tests start the single-node test cluster of
// hack/kube.sh: TestCluster proves that its pods run on gVisor's kernel,
// TestBackend runs jobs through the backend, TestTable the run table every
// backend runs (runtime/runtimetest).
package kubernetes
