// Package kubernetes is skillbox's kubernetes runtime backend (issue 27):
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
// image, skill and layer digests (artifact.go), pulled by digest. Its container only holds the pod open; the job is
// one exec through the API server (argv, env and stdin in; stdout and
// stderr back at the job's caps), and the pod is deleted when it ends, or
// at once on a timeout, an output cap or a cancel.
//
// This is the cold path. Still to come: input files and outputs (a tar
// stream over exec), egress (a NetworkPolicy to skillbox's proxy), warm
// pods, and the sweep of pods a dead daemon left. Jobs that need them are
// refused with runtime.ErrUnavailable rather than run without them, and
// what a job leaves in /work is named in its result's OutputsSkipped as
// not collected.
//
// The package's integration tests start the single-node test cluster of
// hack/kube.sh: TestCluster proves that its pods run on gVisor's kernel,
// TestBackend runs jobs through the backend.
package kubernetes
