// Package api is skillbox's typed tool-call API: the params and results of
// every call as Go types (their JSON names are the wire protocol's), the
// caller's identity (Peer), the events a call may emit while it runs, and
// the error kinds' wire names (the kinds themselves are runtime/errkind's)
// with the data an error carries on the wire.
//
// It is the contract between the transport-free service (sandbox/core/service)
// and its front ends: the JSON-RPC adapter on the Unix socket
// (sandbox/doors/jsonrpc), the MCP server, the Go client (sandbox/client) and the
// CLI. It imports nothing of skillbox but the error kinds and a run's
// outcome (runtime/outcome, the summary a run result shares with the
// sandbox's), so every one of them can depend on it; a field renamed here
// is renamed on every side at once.
package api
