package service

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
)

// drain reads a follower until run.exited, within a second.
func drain(t *testing.T, fl *RunFollower) []api.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var all []api.Event
	for {
		evs, err := fl.Next(ctx)
		if errors.Is(err, io.EOF) {
			return all
		}
		if err != nil {
			t.Fatalf("next after %d events: %v", len(all), err)
		}
		all = append(all, evs...)
	}
}

// outputOf sums a follower's events: the output it got, and what it was
// told was dropped.
func outputOf(evs []api.Event) (out string, droppedBytes int64, end *api.RunExitedEvent) {
	var b strings.Builder
	for _, ev := range evs {
		switch e := ev.(type) {
		case api.RunOutputEvent:
			b.WriteString(e.Data)
		case api.RunOutputDroppedEvent:
			droppedBytes += e.Bytes
		case api.RunExitedEvent:
			end = &e
		}
	}
	return b.String(), droppedBytes, end
}

func TestRunFeed(t *testing.T) {
	chunk := strings.Repeat("x", 1023) + "\n"
	for _, tc := range []struct {
		name string
		// before is written before the follower joins, after once it has.
		before, after int
		// read says whether the follower reads while the run writes.
		read        bool
		wantDropped int64
	}{
		{name: "late joiner gets all that fits the ring", before: 10, after: 5, read: true},
		{name: "late joiner is told what left the ring", before: outputRingBytes/len(chunk) + 7, after: 1, read: true, wantDropped: int64(7 * len(chunk))},
		{name: "a follower that does not read is dropped from, not waited for", before: 0, after: followerQueueBytes/len(chunk) + 9, wantDropped: int64(9 * len(chunk))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRunFeed(api.RunStartedEvent{RunID: "run_1", Skill: "s"})
			w := f.sink(api.StreamStdout)
			for range tc.before {
				w.Write([]byte(chunk))
			}
			fl, err := f.follow()
			if err != nil {
				t.Fatal(err)
			}
			defer fl.Close()
			var got []api.Event
			if tc.read {
				got = append(got, drainNow(t, fl)...)
			}
			done := make(chan struct{})
			go func() {
				for range tc.after {
					w.Write([]byte(chunk))
				}
				f.finish(api.RunExitedEvent{RunID: "run_1", Reason: "cancelled"})
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the run waited for its follower")
			}
			got = append(got, drain(t, fl)...)
			if _, ok := got[0].(api.RunStartedEvent); !ok {
				t.Errorf("first event %#v, want run.started", got[0])
			}
			out, dropped, end := outputOf(got)
			total := int64((tc.before + tc.after) * len(chunk))
			if dropped != tc.wantDropped || int64(len(out))+dropped != total {
				t.Errorf("got %d bytes, told %d dropped, want %d dropped of %d", len(out), dropped, tc.wantDropped, total)
			}
			if end == nil || end.Reason != "cancelled" {
				t.Errorf("end %+v, want cancelled", end)
			}
		})
	}
}

// drainNow takes what is queued without waiting.
func drainNow(t *testing.T, fl *RunFollower) []api.Event {
	t.Helper()
	evs, err := fl.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestRunFeedAfterEnd: a follower that joins after the end gets the ring
// and the end at once.
func TestRunFeedAfterEnd(t *testing.T) {
	f := newRunFeed(api.RunStartedEvent{RunID: "run_1"})
	f.sink(api.StreamStderr).Write([]byte("oops\n"))
	f.finish(api.RunExitedEvent{RunID: "run_1", ExitCode: 3, Reason: "exit"})
	f.sink(api.StreamStdout).Write([]byte("after the end\n"))
	fl, err := f.follow()
	if err != nil {
		t.Fatal(err)
	}
	out, _, end := outputOf(drain(t, fl))
	if out != "oops\n" || end == nil || end.ExitCode != 3 {
		t.Errorf("output %q end %+v", out, end)
	}
}

func TestRunFeedFollowerLimit(t *testing.T) {
	f := newRunFeed(api.RunStartedEvent{RunID: "run_1"})
	for range maxFollowersPerRun {
		if _, err := f.follow(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.follow(); api.KindOf(err) != api.KindLimitExceeded {
		t.Errorf("one follower too many: %v", err)
	}
}
