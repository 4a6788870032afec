package jsonrpc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

func TestErrorMapping(t *testing.T) {
	cases := []struct {
		err  error
		kind string
		code int
	}{
		{fmt.Errorf("x: %w", api.ErrNotFound), api.KindNotFound, CodeNotFound},
		{fmt.Errorf("x: %w", api.ErrInvalidParams), api.KindInvalidParams, CodeInvalidParams},
		{fmt.Errorf("x: %w", api.ErrDenied), api.KindDenied, CodeDenied},
		{fmt.Errorf("x: %w", api.ErrLimitExceeded), api.KindLimitExceeded, CodeLimitExceeded},
		{fmt.Errorf("x: %w", api.ErrUnavailable), api.KindUnavailable, CodeUnavailable},
		{errors.New("plain"), api.KindInternal, CodeInternal},
		{&Error{Message: "custom", Kind: api.KindDenied}, api.KindDenied, CodeDenied},
		{fmt.Errorf("wrapped: %w", &Error{Code: -32050, Message: "custom", Kind: api.KindDenied}), api.KindDenied, -32050},
		{ErrShuttingDown, api.KindUnavailable, CodeUnavailable},
	}
	for _, tc := range cases {
		e := ToRPCError(tc.err)
		if e.Kind != tc.kind || e.Code != tc.code {
			t.Errorf("%v → %s %d, want %s %d", tc.err, e.Kind, e.Code, tc.kind, tc.code)
		}
	}
	if ToRPCError(nil) != nil {
		t.Error("nil error mapped to non-nil")
	}
	// Data: outermost wins, kind is reserved.
	err := api.WithData(fmt.Errorf("outer: %w", api.WithData(api.ErrDenied, map[string]any{"a": 1, "b": 1, "kind": "x"})), map[string]any{"a": 2})
	e := ToRPCError(err)
	if e.Data["a"] != 2 || e.Data["b"] != 1 || e.Data["kind"] != nil {
		t.Errorf("data %v", e.Data)
	}
	b, _ := e.MarshalJSON()
	if !strings.Contains(string(b), `"kind":"denied"`) {
		t.Errorf("marshal %s", b)
	}
}
