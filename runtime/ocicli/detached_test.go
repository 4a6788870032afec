package ocicli

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestReadInitStatus(t *testing.T) {
	tests := []struct {
		name       string
		written    string
		wantCode   int
		wantSignal string
	}{
		{"exit 0", "0\n", 0, ""},
		{"exit 3", "3\n", 3, ""},
		{"killed by TERM", "143\n", 143, "SIGTERM"},
		{"nothing: killed with the sandbox", "", 137, "SIGKILL"},
		{"garbage", "not a number\n", 137, "SIGKILL"},
		{"out of range", "300\n", 137, "SIGKILL"},
		{"the last line counts", "5\n7\n", 7, ""},
		// More than a report: its first 64 bytes count, done only at the end.
		{"a flood", strings.Repeat("1\n", 500), 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			st := readInitStatus(r)
			if _, err := w.WriteString(tt.written); err != nil {
				t.Fatal(err)
			}
			select {
			case <-st.done:
				t.Fatal("done before the write end was closed")
			case <-time.After(20 * time.Millisecond):
			}
			w.Close()
			<-st.done
			code, sig := st.status()
			if code != tt.wantCode || sig != tt.wantSignal {
				t.Errorf("status after %.40q = (%d, %q), want (%d, %q)", tt.written, code, sig, tt.wantCode, tt.wantSignal)
			}
		})
	}
}

func TestReapsOrphans(t *testing.T) {
	if os.Getpid() == 1 {
		t.Skip("this test process is pid 1")
	}
	if reapsOrphans() {
		t.Fatal("reapsOrphans() = true in a process that is neither pid 1 nor a subreaper")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	if !reapsOrphans() {
		t.Error("reapsOrphans() = false in a child subreaper")
	}
}
