package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

// quiet keeps test output readable; set AUDIT_TEST_LOG=1 to see the log.
func quiet() hclog.Logger {
	if os.Getenv("AUDIT_TEST_LOG") != "" {
		return hclog.New(&hclog.LoggerOptions{Level: hclog.Debug})
	}
	return hclog.NewNullLogger()
}

func openT(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// runPair returns start and end records shaped like the daemon's.
func runPair(i int) (*Record, *Record) {
	peer := &api.Peer{UID: 1000, GID: 1000, PID: int32(4000 + i%100), Process: "agent-host"}
	skill := &SkillRef{Name: fmt.Sprintf("pdf-tools-%d", i%7), Digest: "sha256:9f2c1e0b7d3a4c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6"}
	names, envHash := EnvSummary(map[string]string{"LANG": "C.UTF-8", "TZ": "UTC", "API_TOKEN": "s3cret"})
	run := func() *RunInfo {
		return &RunInfo{
			RunID: fmt.Sprintf("run_%08d", i), Script: "scripts/extract_tables.py",
			ScriptSHA256: "4d967a8f1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6",
			Args:         []string{"--input", fmt.Sprintf("report-%d.pdf", i), "--pages", "1-3"},
			EnvNames:     names, EnvHash: envHash,
			Runtime: "runsc", RuntimeVersion: "release-20250101.0",
			Image: "python", ImageDigest: "sha256:1111111111111111111111111111111111111111111111111111111111111111",
			Limits:  runtime.Limits{Timeout: 30 * time.Second, MemoryBytes: 512 << 20, Pids: 128, CPUs: 1, WorkdirBytes: 64 << 20, TmpBytes: 64 << 20, StdoutBytes: 1 << 20, StderrBytes: 1 << 20, OutputBytes: 16 << 20, OutputFiles: 64},
			Network: false,
		}
	}
	start := &Record{Event: EventRunStart, Peer: peer, SessionID: fmt.Sprintf("sess_%04d", i%50), RequestID: fmt.Sprint(i), Skill: skill, Run: run()}
	end := &Record{Event: EventRunEnd, Peer: peer, SessionID: start.SessionID, RequestID: start.RequestID, Skill: skill, Run: run(), Outcome: "exit"}
	start.TraceID = fmt.Sprintf("%032x", i+1) // a traced call (daemon.traces)
	end.TraceID = start.TraceID
	code := i % 3
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Second)
	end.Run.Started, end.Run.Ended, end.Run.DurationMS = t0, t0.Add(41*time.Millisecond), 41
	end.Run.ExitCode, end.Run.Reason = &code, "exit"
	end.Run.StdoutBytes, end.Run.StdoutSHA256 = 1234, "a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192"
	end.Run.StderrBytes, end.Run.StderrSHA256 = 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	end.Run.Outputs = []FileRef{{Path: "outputs/tables.csv", Size: 2048, SHA256: "5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"}}
	return start, end
}

func appendN(t testing.TB, l *Log, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		s, e := runPair(i)
		r := s
		if i%2 == 1 {
			r = e
		}
		if err := l.Append(ctx, r); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
	}
}

func readLines(t testing.TB, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func writeLines(t testing.TB, path string, lines [][]byte) {
	t.Helper()
	if err := os.WriteFile(path, bytes.Join(lines, nil), 0o640); err != nil {
		t.Fatal(err)
	}
}

// reencode decodes a line, lets mutate change it, and writes it back with a
// correct hash for its (possibly changed) prev_hash — what a forger who
// knows the format can do.
func reencode(t testing.TB, line []byte, mutate func(*Record)) ([]byte, string) {
	t.Helper()
	r, _, err := parseLine(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil && !errors.Is(err, errHashMismatch) {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(r)
	}
	body, err := encodeBody(r)
	if err != nil {
		t.Fatal(err)
	}
	out, h := assemble(r.Seq, r.Time, body, r.PrevHash)
	return out, h
}

func file1(dir string) string { return filepath.Join(dir, fileName(1)) }

// faultFS injects write, sync and open failures into the writer. Writes that
// fail still put half their bytes on disk, like a short write on a full disk.
type faultFS struct {
	osFS
	mu        sync.Mutex
	writeErr  error
	syncErr   error
	openErr   error
	skipSync  bool // for fast benchmark setup
	syncCalls int
}

func (f *faultFS) set(fn func(f *faultFS)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	f.mu.Lock()
	err := f.openErr
	f.mu.Unlock()
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	inner, err := f.osFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{file: inner, fs: f}, nil
}

type faultFile struct {
	file
	fs *faultFS
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	err := f.fs.writeErr
	f.fs.mu.Unlock()
	if err != nil {
		n, _ := f.file.WriteAt(p[:len(p)/2], off)
		return n, &os.PathError{Op: "write", Path: "audit", Err: err}
	}
	return f.file.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	err, skip := f.fs.syncErr, f.fs.skipSync
	f.fs.syncCalls++
	f.fs.mu.Unlock()
	if err != nil {
		return &os.PathError{Op: "fsync", Path: "audit", Err: err}
	}
	if skip {
		return nil
	}
	return f.file.Sync()
}

var errNoSpace = syscall.ENOSPC
