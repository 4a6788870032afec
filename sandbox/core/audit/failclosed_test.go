package audit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
)

func openFault(t *testing.T, dir string, opts Options) (*Log, *faultFS) {
	t.Helper()
	fs := &faultFS{}
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	if opts.RetryEvery == 0 {
		opts.RetryEvery = time.Hour // only Append retries, unless a test wants the timer
	}
	l, err := openLog(dir, opts, fs, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return l, fs
}

// A write that fails half way (a full disk) leaves no half line, fails the
// append with ErrUnavailable, keeps the log unhealthy, and the next append
// after the disk has room again works and records the outage.
func TestFailClosedShortWrite(t *testing.T) {
	dir := t.TempDir()
	l, fs := openFault(t, dir, Options{})
	defer l.Close()
	appendN(t, l, 3)
	size := fileSize(t, file1(dir))

	fs.set(func(f *faultFS) { f.writeErr = errNoSpace })
	for i := 0; i < 3; i++ {
		s, _ := runPair(i)
		err := l.Append(context.Background(), s)
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append on a full disk: %v", err)
		}
		if s.Seq != 0 || s.Hash != "" {
			t.Fatal("a failed append must not fill the record")
		}
	}
	h := l.Healthy()
	if !errors.Is(h, ErrUnavailable) || !strings.Contains(h.Error(), "no space left") || !strings.Contains(h.Error(), "3 appends refused") {
		t.Fatalf("Healthy = %v", h)
	}
	if got := fileSize(t, file1(dir)); got != size {
		t.Fatalf("file is %d bytes after failed writes, want %d (no half line)", got, size)
	}
	if seq, _ := l.Head(); seq != 4 {
		t.Fatalf("head moved to %d", seq)
	}

	fs.set(func(f *faultFS) { f.writeErr = nil })
	s, _ := runPair(9)
	if err := l.Append(context.Background(), s); err != nil {
		t.Fatalf("append after space came back: %v", err)
	}
	if err := l.Healthy(); err != nil {
		t.Fatalf("still unhealthy: %v", err)
	}
	if s.Seq != 6 { // 5 is the audit.resumed record
		t.Fatalf("seq %d", s.Seq)
	}
	l.Close()
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil || rep.Outages != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	var resumed *Record
	Read(dir, func(r *Record) error {
		if r.Event == EventResumed {
			resumed = r
		}
		return nil
	})
	if resumed == nil || resumed.Log.Outage.Refused != 3 || !strings.Contains(resumed.Log.Outage.LastError, "no space") {
		t.Fatalf("resumed record %+v", resumed)
	}
}

// fsync failing is as bad as write failing: the record must not count.
func TestFailClosedSync(t *testing.T) {
	dir := t.TempDir()
	l, fs := openFault(t, dir, Options{})
	defer l.Close()
	appendN(t, l, 2)
	size := fileSize(t, file1(dir))
	fs.set(func(f *faultFS) { f.syncErr = syscall.EIO })
	if err := l.Append(context.Background(), &Record{Event: EventSessionCreate}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v", err)
	}
	if fileSize(t, file1(dir)) != size {
		t.Fatal("an unsynced record was left in the file")
	}
	// Still failing: repair cannot sync either.
	if err := l.Append(context.Background(), &Record{Event: EventSessionCreate}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v", err)
	}
	fs.set(func(f *faultFS) { f.syncErr = nil })
	if err := l.Append(context.Background(), &Record{Event: EventSessionClose}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := Verify(dir, VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
}

// With nothing appending (runs are refused while unhealthy), the log heals
// on its own through the retry timer.
func TestFailClosedHealsInBackground(t *testing.T) {
	dir := t.TempDir()
	l, fs := openFault(t, dir, Options{RetryEvery: 10 * time.Millisecond})
	defer l.Close()
	fs.set(func(f *faultFS) { f.writeErr = syscall.EROFS })
	if err := l.Append(context.Background(), &Record{Event: EventSessionCreate}); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if l.Healthy() == nil {
		t.Fatal("healed while writes still fail")
	}
	fs.set(func(f *faultFS) { f.writeErr = nil })
	waitfor.NoError(t, "the log to heal", 5*time.Second, l.Healthy)
	l.Close()
	if _, err := Verify(dir, VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The file cannot even be reopened (e.g. the directory became unwritable or
// was unmounted): appends fail, and recover once it can.
func TestFailClosedReopen(t *testing.T) {
	dir := t.TempDir()
	l, fs := openFault(t, dir, Options{})
	defer l.Close()
	fs.set(func(f *faultFS) { f.writeErr = syscall.EIO; f.openErr = syscall.EACCES })
	for i := 0; i < 2; i++ {
		if err := l.Append(context.Background(), &Record{Event: EventSessionCreate}); !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
	}
	if h := l.Healthy(); !strings.Contains(h.Error(), "permission denied") {
		t.Fatalf("Healthy should say the latest cause: %v", h)
	}
	fs.set(func(f *faultFS) { f.writeErr = nil; f.openErr = nil })
	if err := l.Append(context.Background(), &Record{Event: EventSessionCreate}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := Verify(dir, VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A rotation that fails (the new file cannot be created) fails the append;
// the old file gets nothing more until the rotation succeeds.
func TestFailClosedRotation(t *testing.T) {
	dir := t.TempDir()
	l, fs := openFault(t, dir, Options{RotateBytes: 2 << 10})
	defer l.Close()
	appendN(t, l, 2) // genesis and two run records: past 2 KiB, the next append rotates
	if files, _ := listFiles(dir); len(files) != 1 {
		t.Fatalf("%d files already", len(files))
	}
	size := fileSize(t, file1(dir))
	fs.set(func(f *faultFS) { f.openErr = syscall.ENOSPC })
	if err := l.Append(context.Background(), &Record{Event: EventSessionCreate}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v", err)
	}
	if fileSize(t, file1(dir)) != size {
		t.Fatal("old file written to while its rotation was pending")
	}
	if _, err := os.Stat(filepath.Join(dir, fileName(2))); err == nil {
		t.Fatal("half-made file left behind")
	}
	fs.set(func(f *faultFS) { f.openErr = nil })
	appendN(t, l, 3)
	l.Close()
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil || len(rep.Files) < 2 {
		t.Fatalf("%+v %v", rep, err)
	}
}

// Open on a path that cannot be a directory fails with ErrUnavailable.
func TestOpenUnwritableDir(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := Open(filepath.Join(f, "audit"), Options{Logger: quiet()}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v", err)
	}
}

// Nothing the failure path does may leave a line that is not a whole record.
func TestFailClosedNoPartialLines(t *testing.T) {
	dir := t.TempDir()
	l, fs := openFault(t, dir, Options{})
	defer l.Close()
	for i := 0; i < 30; i++ {
		fail := i%3 == 1
		fs.set(func(f *faultFS) {
			f.writeErr = nil
			if fail {
				f.writeErr = syscall.ENOSPC
			}
		})
		s, _ := runPair(i)
		err := l.Append(context.Background(), s)
		if fail != (err != nil) {
			t.Fatalf("append %d: fail=%v err=%v", i, fail, err)
		}
	}
	l.Close()
	raw, _ := os.ReadFile(file1(dir))
	if !bytes.HasSuffix(raw, []byte("\n")) {
		t.Fatal("file does not end with a whole line")
	}
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil || rep.Outages != 10 {
		t.Fatalf("%+v %v", rep, err)
	}
}
