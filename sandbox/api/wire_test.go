package api_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

// TestWireError decodes error objects as the daemon sends them and checks
// that the one wire type matches its kind's sentinel, reports its data and
// encodes back to the same object.
func TestWireError(t *testing.T) {
	for _, tc := range []struct {
		name, wire string
		kind       string
		sentinel   error
		data       map[string]any
	}{
		{"not found", `{"code":-32001,"message":"no skill x","data":{"kind":"not_found"}}`, api.KindNotFound, api.ErrNotFound, nil},
		{"limit with data", `{"code":-32004,"message":"too big","data":{"kind":"limit_exceeded","limit":"bytes"}}`, api.KindLimitExceeded, api.ErrLimitExceeded, map[string]any{"limit": "bytes"}},
		{"detail", `{"code":-32002,"message":"denied: the user declined","data":{"detail":"the user declined","kind":"denied"}}`, api.KindDenied, api.ErrDenied, nil},
		{"confirmation", `{"code":-32003,"message":"held","data":{"confirmation_id":"c1","kind":"confirmation_required"}}`, api.KindConfirmationRequired, api.ErrConfirmationRequired, map[string]any{"confirmation_id": "c1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e api.Error
			if err := json.Unmarshal([]byte(tc.wire), &e); err != nil {
				t.Fatal(err)
			}
			var err error = &e
			if e.Kind != tc.kind || api.KindOf(err) != tc.kind || !errors.Is(err, tc.sentinel) {
				t.Errorf("kind %q, KindOf %q, Is(%v) %v", e.Kind, api.KindOf(err), tc.sentinel, errors.Is(err, tc.sentinel))
			}
			if got := api.ErrorData(err); len(got) != len(tc.data) || (tc.data != nil && got["limit"] != tc.data["limit"] && got["confirmation_id"] != tc.data["confirmation_id"]) {
				t.Errorf("ErrorData = %v, want %v", got, tc.data)
			}
			b, err2 := json.Marshal(&e)
			if err2 != nil {
				t.Fatal(err2)
			}
			var back, orig any
			json.Unmarshal(b, &back)
			json.Unmarshal([]byte(tc.wire), &orig)
			if bb, _ := json.Marshal(back); string(bb) != func() string { ob, _ := json.Marshal(orig); return string(ob) }() {
				t.Errorf("encoded back as %s, want %s", bb, tc.wire)
			}
		})
	}
	if errors.Is(&api.Error{Message: "no kind"}, api.ErrInternal) {
		t.Error("an error without a kind matches a sentinel")
	}
}
