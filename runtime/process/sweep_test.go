package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
)

// sweepFake is a backend state dir and host for the sweeper: containers by
// id, and a record of everything the sweeper did to them.
type sweepFake struct {
	mu         sync.Mutex
	containers map[string]ContainerState
	calls      []string // "delete id", "kill id", "rmcg id", "umount path"
	// check, when set, is called with every id the sweeper acts on.
	check func(op, id string)
}

func newSweepFake(cs ...ContainerState) *sweepFake {
	f := &sweepFake{containers: map[string]ContainerState{}}
	for _, c := range cs {
		f.containers[c.ID] = c
	}
	return f
}

func (f *sweepFake) record(op, id string) {
	if f.check != nil {
		f.check(op, id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, op+" "+id)
}

func (f *sweepFake) sweeper(runDir string) *Sweeper {
	cgID := func(p string) string { return strings.TrimPrefix(p, oci.CgroupParent+"/") }
	return &Sweeper{
		runDir: runDir,
		log:    hclog.NewNullLogger(),
		list: func(context.Context) ([]ContainerState, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			var out []ContainerState
			for _, c := range f.containers {
				out = append(out, c)
			}
			sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
			return out, nil
		},
		state: func(_ context.Context, id string) (*ContainerState, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if c, ok := f.containers[id]; ok {
				return &c, nil
			}
			return nil, fmt.Errorf("container %q does not exist", id)
		},
		delete: func(_ context.Context, id string) error {
			f.record("delete", id)
			f.mu.Lock()
			defer f.mu.Unlock()
			delete(f.containers, id)
			return nil
		},
		unmount: func(target string) error {
			f.record("umount", target)
			return nil
		},
		killCgroup: func(_ context.Context, p string) error {
			f.record("kill", cgID(p))
			return nil
		},
		removeCgroup: func(_ context.Context, p string) error {
			f.record("rmcg", cgID(p))
			return nil
		},
	}
}

func (f *sweepFake) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.calls)
	sort.Strings(out)
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestMakeRunDir(t *testing.T) {
	runDir := t.TempDir()
	lock, err := oci.MakeRunDir(runDir, "skillbox-a")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(runDir, "skillbox-a")
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm() != oci.RunDirMode {
		t.Fatalf("run dir %v %v", st, err)
	}
	if _, err := oci.LockDir(dir, true); !errors.Is(err, oci.ErrLocked) {
		t.Errorf("run dir not locked: %v", err)
	}
	if _, err := oci.MakeRunDir(runDir, "skillbox-a"); !errors.Is(err, runtime.ErrInvalidJob) {
		t.Errorf("second run dir with the same id: %v", err)
	}
	// An empty directory of that name is not replaced either.
	if err := os.Mkdir(filepath.Join(runDir, "skillbox-b"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := oci.MakeRunDir(runDir, "skillbox-b"); !errors.Is(err, runtime.ErrInvalidJob) {
		t.Errorf("run dir over an empty dir: %v", err)
	}
	ents, _ := os.ReadDir(runDir)
	if len(ents) != 2 {
		t.Errorf("temporary dirs left: %v", ents)
	}
	lock.Close()
	l2, err := oci.LockDir(dir, true)
	if err != nil {
		t.Errorf("lock not released on close: %v", err)
	} else {
		l2.Close()
	}
}

// TestSweepAttribution: Sweep acts on dead runs of its own run dir and on
// containers it owns that lost their run dir, never on live runs, other run
// dirs' containers or ids it cannot attribute.
func TestSweepAttribution(t *testing.T) {
	runDir := t.TempDir()
	other := t.TempDir()
	at := func(id string) string { return filepath.Join(runDir, id) }

	// A live run: locked run dir and its container.
	liveLock, err := oci.MakeRunDir(runDir, "skillbox-live")
	if err != nil {
		t.Fatal(err)
	}
	defer liveLock.Close()
	// A dead run that got as far as its container, and one that did not.
	for _, id := range []string{"skillbox-dead", "skillbox-dead-early", "custom-dead"} {
		if err := os.MkdirAll(filepath.Join(at(id), oci.BundleWorkdir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f := newSweepFake(
		ContainerState{ID: "skillbox-live", Status: "running", Bundle: at("skillbox-live")},
		ContainerState{ID: "skillbox-dead", Status: "running", Bundle: at("skillbox-dead")},
		// A dead run without IDPrefix: its run dir makes it ours.
		ContainerState{ID: "custom-dead", Status: "running", Bundle: at("custom-dead")},
		// A run that died after removing its run dir.
		ContainerState{ID: "skillbox-orphan", Status: "stopped", Bundle: at("skillbox-orphan")},
		// Another RunDir's run sharing the state dir.
		ContainerState{ID: "skillbox-foreign", Status: "running", Bundle: filepath.Join(other, "skillbox-foreign")},
		// Not made by skillbox.
		ContainerState{ID: "someone-else", Status: "running", Bundle: at("someone-else")},
		// A bundle we cannot tell.
		ContainerState{ID: "skillbox-nobundle", Status: "running"},
	)
	if err := f.sweeper(runDir).Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{
		// skillbox-dead-early has no container to show, but runc may have
		// left a half-made state dir for it: delete --force is tried.
		"delete custom-dead", "delete skillbox-dead", "delete skillbox-dead-early", "delete skillbox-orphan",
		"kill custom-dead", "kill skillbox-dead", "kill skillbox-dead-early",
		"rmcg custom-dead", "rmcg skillbox-dead", "rmcg skillbox-dead-early", "rmcg skillbox-orphan",
		"umount " + filepath.Join(at("custom-dead"), oci.BundleWorkdir),
		"umount " + filepath.Join(at("skillbox-dead"), oci.BundleWorkdir),
		"umount " + filepath.Join(at("skillbox-dead-early"), oci.BundleWorkdir),
	}
	sort.Strings(want)
	if got := f.recorded(); !slices.Equal(got, want) {
		t.Errorf("sweep did\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if !exists(at("skillbox-live")) {
		t.Error("the live run's dir was removed")
	}
	for _, id := range []string{"skillbox-dead", "skillbox-dead-early", "custom-dead"} {
		if exists(at(id)) {
			t.Errorf("dead run dir %s left", id)
		}
	}
}

// A dead run dir whose id names a container made from another bundle: the
// container and the cgroup of that name are not the run's.
func TestSweepDeadRunDirForeignContainer(t *testing.T) {
	runDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(runDir, "skillbox-x"), 0o700); err != nil {
		t.Fatal(err)
	}
	f := newSweepFake(ContainerState{ID: "skillbox-x", Status: "running", Bundle: "/elsewhere/skillbox-x"})
	if err := f.sweeper(runDir).Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"umount " + filepath.Join(runDir, "skillbox-x", oci.BundleWorkdir)}
	if got := f.recorded(); !slices.Equal(got, want) {
		t.Errorf("sweep did %v, want %v", got, want)
	}
}

// Temporary run dirs: a crashed maker's (unlocked) is removed; one being
// made (locked, or unlocked but its maker alive) is not, nor one with
// something in it.
func TestSweepPrepDirs(t *testing.T) {
	runDir := t.TempDir()
	const deadPid = "999999999" // above any pid_max: no such process
	stale := filepath.Join(runDir, oci.PrepPrefix+"skillbox-a-"+deadPid+"-1")
	busy := filepath.Join(runDir, oci.PrepPrefix+"skillbox-b-"+deadPid+"-2")
	full := filepath.Join(runDir, oci.PrepPrefix+"skillbox-c-"+deadPid+"-3")
	making := filepath.Join(runDir, oci.PrepName("skillbox-d")+"4")
	for _, d := range []string{stale, busy, making, filepath.Join(full, "x")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	l, err := oci.LockDir(busy, false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := newSweepFake()
	err = f.sweeper(runDir).Sweep(context.Background())
	if err == nil || !strings.Contains(err.Error(), full) {
		t.Errorf("want an error about %s, got %v", full, err)
	}
	if exists(stale) || !exists(busy) || !exists(full) || !exists(making) {
		t.Errorf("stale %v busy %v full %v making %v; want only stale gone", exists(stale), exists(busy), exists(full), exists(making))
	}
	if got := f.recorded(); len(got) != 0 {
		t.Errorf("sweep acted on containers or cgroups: %v", got)
	}
}

// TestSweepRacesRunDirs runs sweeps back to back while runs make, hold and
// remove their run dirs as fast as they can: no sweep may ever act on a run
// that holds its run dir, however young, and no run may lose its dir.
func TestSweepRacesRunDirs(t *testing.T) {
	runDir := t.TempDir()
	var mu sync.Mutex
	live := map[string]bool{}
	var violations []string
	f := newSweepFake()
	f.check = func(op, id string) {
		id = strings.TrimPrefix(id, runDir+"/")
		id, _, _ = strings.Cut(id, "/")
		mu.Lock()
		defer mu.Unlock()
		if live[id] {
			violations = append(violations, op+" "+id)
		}
	}
	s := f.sweeper(runDir)

	done := make(chan struct{})
	var sweeps int
	sweepErr := make(chan error, 1)
	go func() {
		defer close(sweepErr)
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := s.Sweep(context.Background()); err != nil {
				sweepErr <- err
				return
			}
			sweeps++
		}
	}()

	const runners, runs = 2, 300
	var wg sync.WaitGroup
	errs := make(chan error, runners)
	for r := 0; r < runners; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for i := 0; i < runs; i++ {
				id := fmt.Sprintf("skillbox-%d-%d", r, i)
				lock, err := oci.MakeRunDir(runDir, id)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				live[id] = true
				mu.Unlock()
				dir := filepath.Join(runDir, id)
				// The run makes its bundle while a sweep may be looking.
				if err := os.Mkdir(filepath.Join(dir, oci.BundleWorkdir), 0o700); err != nil {
					errs <- fmt.Errorf("run %s lost its run dir: %w", id, err)
					return
				}
				mu.Lock()
				delete(live, id)
				mu.Unlock()
				if err := os.RemoveAll(dir); err != nil {
					errs <- err
					return
				}
				lock.Close()
			}
		}(r)
	}
	wg.Wait()
	close(done)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-sweepErr; err != nil {
		t.Errorf("sweep: %v", err)
	}
	if len(violations) > 0 {
		t.Errorf("sweeps acted on live runs: %v", violations)
	}
	if ents, _ := os.ReadDir(runDir); len(ents) > 0 {
		t.Errorf("left in the run dir: %v", ents)
	}
	t.Logf("%d sweeps raced %d runs", sweeps, runners*runs)
}

// TestMakePrivateDir: the run dir is made 0700 with reachable parents, an
// older, more open one is closed, and a link or another user's dir is
// refused.
func TestMakePrivateDir(t *testing.T) {
	base := t.TempDir()
	t.Run("new", func(t *testing.T) {
		dir := filepath.Join(base, "a", "runs")
		if err := oci.MakePrivateDir(dir, "run dir"); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]os.FileMode{dir: oci.RunDirMode, filepath.Dir(dir): oci.RunDirsParents} {
			if st, err := os.Lstat(p); err != nil || st.Mode().Perm() != want {
				t.Errorf("%s: %v %v, want mode %o", p, st.Mode(), err, want)
			}
		}
	})
	t.Run("older-and-open", func(t *testing.T) {
		dir := filepath.Join(base, "old")
		if err := os.Mkdir(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := oci.MakePrivateDir(dir, "run dir"); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Lstat(dir); err != nil || st.Mode().Perm() != oci.RunDirMode {
			t.Errorf("%s: %v %v, want it closed to %o", dir, st.Mode(), err, oci.RunDirMode)
		}
	})
	t.Run("link", func(t *testing.T) {
		target := filepath.Join(base, "target")
		if err := os.Mkdir(target, 0o755); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(base, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if err := oci.MakePrivateDir(link, "run dir"); err == nil {
			t.Error("a link was taken for the run dir")
		}
		if st, _ := os.Stat(target); st.Mode().Perm() != 0o755 {
			t.Errorf("the link's target was changed to %v", st.Mode())
		}
	})
	t.Run("other-users", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to make a dir of another uid")
		}
		dir := filepath.Join(base, "theirs")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := oci.MakePrivateDir(dir, "run dir"); !errors.Is(err, runtime.ErrUnavailable) {
			t.Errorf("another user's run dir: %v", err)
		}
	})
}
