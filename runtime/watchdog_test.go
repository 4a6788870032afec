package runtime

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestWatchdogMain(t *testing.T) {
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixNano(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Second).UnixNano(), 10)
	gone := "/skillbox/skillbox-watchdog-test-no-such-cgroup"
	for _, tc := range []struct {
		name    string
		args    []string
		release string
		want    int
		log     string
	}{
		{"released by its daemon", []string{"skillbox-x", gone, future}, "\n", 0, ""},
		{"daemon gone, nothing left at the deadline", []string{"skillbox-x", gone, past}, "", 0, ""},
		{"missing arguments", []string{"skillbox-x"}, "", 2, "want run id"},
		{"bad deadline", []string{"skillbox-x", gone, "soon"}, "", 2, "deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			if got := watchdogMain(tc.args, strings.NewReader(tc.release), &log); got != tc.want {
				t.Fatalf("exit %d, want %d (log %q)", got, tc.want, log.String())
			}
			if !strings.Contains(log.String(), tc.log) {
				t.Errorf("log %q, want it to mention %q", log.String(), tc.log)
			}
		})
	}
}

// The watchdog is this very binary started again under watchdogArg0; a
// released one and one whose daemon is gone both end on their own.
func TestWatchdogProcess(t *testing.T) {
	gone := "/skillbox/skillbox-watchdog-test-no-such-cgroup"
	log := filepath.Join(t.TempDir(), "watchdog.log")
	w, err := startWatchdog("skillbox-x", gone, time.Now().Add(time.Hour), log)
	if err != nil {
		t.Fatal(err)
	}
	w.release.Write([]byte{'\n'})
	w.release.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("released watchdog: %v", err)
	}

	w, err = startWatchdog("skillbox-x", gone, time.Now().Add(200*time.Millisecond), log)
	if err != nil {
		t.Fatal(err)
	}
	w.release.Close() // the daemon died
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("watchdog of a dead daemon: %v", err)
	}

	// Sweep ends the watchdog of a dead run it removed (root's only).
	if os.Geteuid() != 0 {
		t.Skip("endWatchdogs ends root's watchdogs only: run as root")
	}
	w, err = startWatchdog("skillbox-swept", gone, time.Now().Add(time.Hour), log)
	if err != nil {
		t.Fatal(err)
	}
	defer w.release.Close()
	endWatchdogs("skillbox-other")
	endWatchdogs("skillbox-swept")
	if err := w.cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("watchdog after endWatchdogs: %v, want killed", err)
	}
}

// BenchmarkStartWatchdog: what a job's watchdog costs the run that starts
// it (fork and exec of this binary; its own start-up runs alongside and
// is not timed).
func BenchmarkStartWatchdog(b *testing.B) {
	log := filepath.Join(b.TempDir(), "watchdog.log")
	for i := 0; i < b.N; i++ {
		w, err := startWatchdog("skillbox-x", "/skillbox/skillbox-watchdog-bench", time.Now().Add(time.Hour), log)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		w.release.Write([]byte{'\n'})
		w.release.Close()
		w.cmd.Wait()
		b.StartTimer()
	}
}
