// Package sandbox is skillbox's core: the engine that turns a run request into
// one isolated container run, the session manager, the tool handlers behind
// the JSON-RPC server on the Unix socket, peer-credential checks and
// confirmations. The CLI's `skillbox run` and the daemon share the engine.
package sandbox
