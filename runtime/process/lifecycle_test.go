package process

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// TestStageOrder: each lifecycle call moves the stage on once, in order,
// and a call out of order is refused with the backends' messages.
func TestStageOrder(t *testing.T) {
	tests := []struct {
		name  string
		from  Stage
		call  func(*Stage) error
		want  Stage
		error string
	}{
		{"start", StageCreated, func(s *Stage) error { return s.Start("sb") }, StageStarted, ""},
		{"start twice", StageStarted, func(s *Stage) error { return s.Start("sb") }, StageStarted, "sandbox sb: Start after Start"},
		{"deliver before start", StageCreated, func(s *Stage) error {
			_, err := s.Deliver(context.Background(), runtime.SandboxSpec{ID: "sb"}, runtime.Invocation{}, "", nil)
			return err
		}, StageCreated, "sandbox sb: Deliver before Start or twice"},
		{"deliver twice", StageDelivered, func(s *Stage) error {
			_, err := s.Deliver(context.Background(), runtime.SandboxSpec{ID: "sb"}, runtime.Invocation{}, "", nil)
			return err
		}, StageDelivered, "sandbox sb: Deliver before Start or twice"},
		{"wait", StageDelivered, func(s *Stage) error { return s.Wait("sb", true) }, StageWaited, ""},
		{"wait without a job", StageDelivered, func(s *Stage) error { return s.Wait("sb", false) }, StageDelivered, "sandbox sb: Wait without a delivered job"},
		{"wait twice", StageWaited, func(s *Stage) error { return s.Wait("sb", true) }, StageWaited, "sandbox sb: Wait without a delivered job"},
		{"wait before deliver", StageStarted, func(s *Stage) error { return s.Wait("sb", true) }, StageStarted, "sandbox sb: Wait without a delivered job"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.from
			err := tt.call(&st)
			if got := ""; err != nil {
				got = err.Error()
				if got != tt.error {
					t.Errorf("error %q, want %q", got, tt.error)
				}
			} else if tt.error != "" {
				t.Errorf("no error, want %q", tt.error)
			}
			if st != tt.want {
				t.Errorf("stage %d, want %d", st, tt.want)
			}
		})
	}
}

func TestHandOver(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in := w
	job := runtime.Job{Invocation: runtime.Invocation{Args: []string{"python3", "-c", "pass"}}}
	started, err := HandOver(&in, job)
	if err != nil {
		t.Fatal(err)
	}
	if in != nil || started.IsZero() {
		t.Errorf("after HandOver: stdin %v, started %v", in, started)
	}
	want, err := SupervisorMessage(job)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break // EOF: HandOver closed the write end
		}
	}
	if got.String() != string(want) {
		t.Errorf("supervisor read %q, want %q", got.String(), want)
	}
}

func TestDestroyOnce(t *testing.T) {
	var d DestroyOnce
	calls := 0
	boom := errors.New("boom")
	for range 3 {
		if err := d.Do(func() error { calls++; return boom }); err != boom {
			t.Errorf("Do = %v, want %v", err, boom)
		}
	}
	if calls != 1 {
		t.Errorf("destroy ran %d times", calls)
	}
}
