// Package agentauth is the mutual-TLS identity between the skillbox daemon
// and the agent (the in-sandbox supervisor) in each sandbox pod.
//
// The daemon holds a private certificate authority, a [CA]. When it creates
// a pod it reads the pod's UID from the API server; the agent in the pod
// makes its own key with [NewKeyAndCSR] (the key never leaves the pod) and
// the daemon signs the request with [CA.SignPod], writing into the
// certificate the identity it decided, never what the request asked for.
// Each daemon replica gets a client certificate from the same CA with
// [CA.IssueDaemon]. [DaemonClientConfig] and [AgentServerConfig] make the
// two ends of a TLS 1.3 connection that each verify the other.
//
// Why one identity per pod: pod IPs are reused, so an address says nothing
// about who answers on it, and one certificate shared by every pod would let
// any pod that a job broke out into pose as any other pod and receive that
// pod's inputs. The daemon names the pod it means ([PodIdentity]) on each
// dial, and a certificate for any other pod is refused.
//
// Why the UID: a pod deleted and created again under the same name (a warm
// pool's names, a StatefulSet) is a different pod. The API server gives each
// incarnation a fresh UID, so a certificate of the old pod does not open the
// new one.
//
// What a stolen credential opens. A pod's key opens that one pod, until its
// certificate expires (hours): it is valid for server auth only, so the thief
// can answer the daemon when the daemon dials that very pod, and can neither
// pose as another pod nor reach another pod's agent as a client. A daemon
// replica's key opens every agent of this CA until it expires, so it is made
// in the daemon's memory and short-lived. The CA key opens everything: keep
// it in a Secret that only the daemon's service account can read. Inside the
// pod the job runs as another uid and in a network namespace of its own, so
// it can read neither the agent's key nor connect to the agent.
//
// Identities travel as one URI subject alternative name:
// skillbox://pod/<namespace>/<name>/<uid> and skillbox://daemon/<instance>.
// Host names, DNS names and IP addresses are not part of the check, and the
// CA certificate's name constraints forbid them, so no certificate chained
// to this CA, not even one signed with a stolen CA key, passes an RFC 5280
// verifier as a web server or any other DNS name or IP address.
package agentauth
