package api

import "encoding/json"

// Refusal is a message a front end refused before it became a call (a
// line that is not JSON, a member named twice, an over-long line), for the
// audit log. It carries no part of the message beyond its id and method:
// a refused line may hold env values or stdin.
type Refusal struct {
	// Transport names the front end, like "mcp".
	Transport string
	// ID is the request id as sent when it could be told; Method likewise.
	ID     json.RawMessage
	Method string
	// Code is the JSON-RPC error code the client was answered with, Kind
	// the error kind (invalid_params, limit_exceeded) and Message its text.
	Code    int
	Kind    string
	Message string
	// LineBytes is the refused line's length; LineSHA256 its hash, when
	// the whole line was read.
	LineBytes  int
	LineSHA256 string
}
