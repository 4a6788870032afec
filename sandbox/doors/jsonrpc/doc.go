// Package jsonrpc is the daemon's wire protocol: JSON-RPC 2.0 over a Unix
// stream socket, one JSON object per line, each caller identified by the
// kernel (SO_PEERCRED). RegisterService adapts an api.Service to it: decode,
// call, encode. Error kinds become JSON-RPC codes here and nowhere else, and
// a call's events become notifications through a bounded queue per
// connection, so a client that reads slowly holds up nobody.
package jsonrpc
