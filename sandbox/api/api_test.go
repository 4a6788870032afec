package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/skillbox/skillbox/runtime/errkind"
)

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain", errors.New("boom"), KindInternal},
		{"not found", fmt.Errorf("x: %w", ErrNotFound), KindNotFound},
		{"confirmation", &ConfirmationRequiredError{ID: "cnf_1"}, KindConfirmationRequired},
		{"cancelled", fmt.Errorf("stopped: %w", context.Canceled), KindUnavailable},
		{"first wins", errkind.Wrap(ErrDenied, ErrUnavailable), KindDenied},
		{"outermost wins over the table's order", errkind.Wrap(ErrInternal, errkind.Errorf(ErrNotFound, "gone")), KindInternal},
		{"kind under context", fmt.Errorf("load: %w", errkind.Wrap(ErrUnavailable, errkind.Errorf(ErrInvalidParams, "x"))), KindUnavailable},
		{"audited", MarkAudited(errkind.Errorf(ErrDenied, "no")), KindDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := KindOf(tc.err); got != tc.want {
				t.Errorf("KindOf = %q, want %q", got, tc.want)
			}
		})
	}
	for _, k := range Kinds {
		if Sentinel(k.Kind) != k.Sentinel {
			t.Errorf("Sentinel(%q) is not its table entry", k.Kind)
		}
	}
}

func TestErrorData(t *testing.T) {
	err := WithData(fmt.Errorf("outer: %w", WithData(&ConfirmationRequiredError{ID: "cnf_1", Rule: "r"}, map[string]any{"rule": "inner", "kind": "x"})), map[string]any{"limit": 3})
	d := ErrorData(err)
	if d["limit"] != 3 || d["confirmation_id"] != "cnf_1" || d["rule"] != "inner" || d["kind"] != nil {
		t.Errorf("ErrorData = %v", d)
	}
	if !IsAudited(MarkAudited(err)) || IsAudited(err) {
		t.Error("audited mark wrong")
	}
}

func TestEventsJSON(t *testing.T) {
	b, _ := json.Marshal(RunOutputEvent{RunID: "run_1", Stream: StreamStdout, Seq: 2, Data: "hi\n"})
	if string(b) != `{"run_id":"run_1","stream":"stdout","seq":2,"data":"hi\n"}` {
		t.Errorf("run.output = %s", b)
	}
	ctx := WithEventSink(WithRequestID(context.Background(), "7"), func(Event) {})
	if EventSinkFrom(ctx) == nil || RequestIDFrom(ctx) != "7" || EventSinkFrom(context.Background()) != nil {
		t.Error("context helpers")
	}
}
