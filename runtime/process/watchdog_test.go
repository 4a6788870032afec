package process

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/runtime"
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
	w, err := StartWatchdog("skillbox-x", gone, time.Now().Add(time.Hour), log)
	if err != nil {
		t.Fatal(err)
	}
	w.release.Write([]byte{'\n'})
	w.release.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("released watchdog: %v", err)
	}

	w, err = StartWatchdog("skillbox-x", gone, time.Now().Add(200*time.Millisecond), log)
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
	w, err = StartWatchdog("skillbox-swept", gone, time.Now().Add(time.Hour), log)
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
		w, err := StartWatchdog("skillbox-x", "/skillbox/skillbox-watchdog-bench", time.Now().Add(time.Hour), log)
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

// fakeSandboxWatchdog records when its sweep and its kill ran.
type fakeSandboxWatchdog struct {
	mu           sync.Mutex
	swept, kills []time.Time
}

func (f *fakeSandboxWatchdog) watchdog(procs []int) *sandboxWatchdog {
	return &sandboxWatchdog{
		id: "skillbox-warm-x", cg: "/skillbox/skillbox-warm-x", log: hclog.NewNullLogger(),
		procs: func(string) []int { return procs },
		killCgroup: func(context.Context, string) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.kills = append(f.kills, time.Now())
			return nil
		},
		sweep: func(context.Context) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.swept = append(f.swept, time.Now())
			return nil
		},
	}
}

// A sandbox's watchdog: released by its daemon it
// does nothing; when the daemon is gone it sweeps the sandbox at once if
// no job was delivered, at the job's deadline if one was; a deadline that
// passes with the daemon alive kills what is left in the cgroup and the
// watchdog stays.
func TestSandboxWatchdogTiming(t *testing.T) {
	msg := func(d time.Duration) string {
		return deadlineMsg + strconv.FormatInt(time.Now().Add(d).UnixNano(), 10) + "\n"
	}
	fixed := func(s string) func() string { return func() string { return s } }
	for _, tc := range []struct {
		name      string
		release   func() string
		procs     []int
		swept     bool
		notBefore time.Duration // the sweep not before this
		kills     int
	}{
		{name: "released while idle", release: fixed("\n")},
		{name: "released after its job", release: func() string { return msg(time.Hour) + "\n" }},
		{name: "daemon gone while idle", release: fixed(""), swept: true},
		{name: "daemon gone inside a message", release: fixed("deadl"), swept: true},
		{name: "daemon gone with a job in flight", release: func() string { return msg(300 * time.Millisecond) }, swept: true, notBefore: 250 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f fakeSandboxWatchdog
			start := time.Now()
			if got := f.watchdog(tc.procs).run(strings.NewReader(tc.release())); got != 0 {
				t.Fatalf("exit %d", got)
			}
			if tc.swept != (len(f.swept) == 1) || len(f.swept) > 1 {
				t.Fatalf("swept %d times, want swept %v", len(f.swept), tc.swept)
			}
			if tc.swept {
				if took := f.swept[0].Sub(start); took < tc.notBefore || took > tc.notBefore+5*time.Second {
					t.Errorf("swept after %s, want after %s and soon", took, tc.notBefore)
				}
			}
		})
	}

	t.Run("deadline passes with the daemon alive", func(t *testing.T) {
		var f fakeSandboxWatchdog
		r, w := io.Pipe()
		done := make(chan int, 1)
		go func() { done <- f.watchdog([]int{42}).run(r) }()
		fmt.Fprint(w, msg(50*time.Millisecond))
		time.Sleep(300 * time.Millisecond)
		f.mu.Lock()
		kills, swept := len(f.kills), len(f.swept)
		f.mu.Unlock()
		if kills != 1 || swept != 0 {
			t.Fatalf("after the deadline: %d kills, %d sweeps; want 1 kill, no sweep (the daemon is alive)", kills, swept)
		}
		w.Write([]byte("\n")) // the daemon removed the sandbox
		if got := <-done; got != 0 || len(f.swept) != 0 {
			t.Fatalf("exit %d, %d sweeps after the release", got, len(f.swept))
		}
	})
}

func TestRunSandboxWatchdogArgs(t *testing.T) {
	for _, args := range [][]string{nil, {"skillbox-x", "/skillbox/skillbox-x"}, {"../x", "/cg", "/run/skillbox/runs"}, {"skillbox-x", "/cg", "runs"}} {
		var log bytes.Buffer
		ops := func(context.Context, []string, runtime.Logger) (SweepOps, error) {
			t.Fatal("ops called")
			return SweepOps{}, nil
		}
		if got := RunSandboxWatchdog(args, strings.NewReader(""), &log, ops); got != 2 || !strings.Contains(log.String(), "want sandbox id") {
			t.Errorf("args %q: exit %d, log %q; want 2 and what is wanted", args, got, log.String())
		}
	}
}
