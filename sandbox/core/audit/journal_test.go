package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
)

// appended is what an AppendObserver heard.
type appended struct {
	event  string
	seq    uint64
	failed bool
}

type fakeObserver struct{ heard []appended }

func (f *fakeObserver) Appended(r *audit.Record, took time.Duration, err error) {
	if took < 0 {
		panic("negative append time")
	}
	f.heard = append(f.heard, appended{event: r.Event, seq: r.Seq, failed: err != nil})
}

// TestJournalObserve: the observer hears every append once it has ended
// (the record as appended, and whether it failed); a journal without an
// audit log appends nothing and tells nobody.
func TestJournalObserve(t *testing.T) {
	ctx := context.Background()
	au := &servicetest.Auditor{}
	j := audit.NewJournal(au, nil)
	var o fakeObserver
	j.Observe(&o)
	if err := j.Record(ctx, &audit.Record{Event: audit.EventSessionCreate}); err != nil {
		t.Fatal(err)
	}
	au.Fail(errors.New("disk full"))
	if err := j.Record(ctx, &audit.Record{Event: audit.EventSessionClose}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("failed append: %v", err)
	}
	want := []appended{{audit.EventSessionCreate, 1, false}, {audit.EventSessionClose, 0, true}}
	if len(o.heard) != len(want) || o.heard[0] != want[0] || o.heard[1] != want[1] {
		t.Errorf("heard %+v, want %+v", o.heard, want)
	}

	none := audit.NewJournal(nil, nil)
	var o2 fakeObserver
	none.Observe(&o2)
	if err := none.Record(ctx, &audit.Record{Event: audit.EventSessionCreate}); err != nil || len(o2.heard) != 0 {
		t.Errorf("journal without a log: %v, heard %+v", err, o2.heard)
	}
}
