package jsonrpc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/skills"
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
	// Detail: the message without its kind's words, structurally.
	for _, tc := range []struct {
		err                 error
		message, wantDetail string
	}{
		{errkind.Errorf(api.ErrDenied, "the user declined %s", "x"), "denied: the user declined x", "the user declined x"},
		{api.MarkAudited(errkind.Wrap(api.ErrNotFound, errors.New("no skill y"))), "not found: no skill y", "no skill y"},
		{fmt.Errorf("load: %w", errkind.Errorf(api.ErrDenied, "no")), "load: denied: no", "load: denied: no"},
		// A sentinel of a kind speaks its own words; one that wraps its
		// kind speaks for the kind.
		{errkind.Errorf(skills.ErrNotFound, "%q", "x"), `not found: "x"`, `not found: "x"`},
		{errkind.Errorf(store.ErrConfirmationUsed, "c_1"), "confirmation already used: c_1", "c_1"},
	} {
		e := ToRPCError(tc.err)
		if e.Message != tc.message || e.Detail != tc.wantDetail {
			t.Errorf("%v → message %q detail %q, want %q and %q", tc.err, e.Message, e.Detail, tc.message, tc.wantDetail)
		}
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
