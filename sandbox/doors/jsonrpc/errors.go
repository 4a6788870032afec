package jsonrpc

import (
	"errors"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// JSON-RPC error codes. The first five are the standard ones; domain errors
// use the implementation-defined range -32000..-32099, one code per kind, so a
// plain JSON-RPC client that ignores data.kind can still tell them apart.
const (
	CodeParseError           = -32700
	CodeInvalidRequest       = -32600
	CodeMethodNotFound       = -32601
	CodeInvalidParams        = -32602
	CodeInternal             = -32603
	CodeNotFound             = -32001
	CodeDenied               = -32002
	CodeConfirmationRequired = -32003
	CodeLimitExceeded        = -32004
	CodeUnavailable          = -32005
)

// Error is the JSON-RPC error object, the wire error type both ends share
// (api.Error). Kind is always present in data; Data holds extra fields a
// host can act on (confirmation_id, limit, methods, ...). A handler may
// return an *Error directly when it needs full control of the code or data.
type Error = api.Error

// kindCodes maps each kind to its JSON-RPC code; this is the only place
// kinds meet JSON-RPC.
var kindCodes = map[string]int{
	api.KindNotFound:             CodeNotFound,
	api.KindInvalidParams:        CodeInvalidParams,
	api.KindDenied:               CodeDenied,
	api.KindConfirmationRequired: CodeConfirmationRequired,
	api.KindLimitExceeded:        CodeLimitExceeded,
	api.KindUnavailable:          CodeUnavailable,
	api.KindInternal:             CodeInternal,
}

// CodeForKind returns the JSON-RPC code used for kind (internal for an
// unknown kind).
func CodeForKind(kind string) int {
	if c, ok := kindCodes[kind]; ok {
		return c
	}
	return CodeInternal
}

// ToRPCError converts a handler's error into the error object sent to the
// client. An *Error anywhere in the chain is used as is (its Kind defaulted
// to internal, its Code defaulted from the kind). Otherwise the kind is
// api.KindOf's, the code the kind's, the message err.Error() (the service
// writes messages a model can act on; do not put secrets in them), and data
// api.ErrorData's. nil maps to nil.
func ToRPCError(err error) *Error {
	if err == nil {
		return nil
	}
	var re *Error
	if errors.As(err, &re) {
		out := *re
		if out.Kind == "" {
			out.Kind = api.KindInternal
		}
		if out.Code == 0 {
			out.Code = CodeForKind(out.Kind)
		}
		return &out
	}
	kind := api.KindOf(err)
	return &Error{Code: CodeForKind(kind), Message: err.Error(), Kind: kind,
		Detail: errkind.Detail(err, api.Sentinel(kind)), Data: api.ErrorData(err)}
}
