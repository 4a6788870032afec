package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
)

// signedLog writes genesis + n records with a checkpoint after every 10 and
// one on Close; it returns the dir, the public key and the checkpoints file.
func signedLog(t *testing.T, n int, opts Options) (string, ed25519.PublicKey, string) {
	t.Helper()
	dir := t.TempDir()
	keyPath := filepath.Join(t.TempDir(), "audit.key")
	pub, err := GenerateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := LoadPrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	opts.SigningKey, opts.CheckpointEvery = priv, -1
	l := openT(t, dir, opts)
	for i := 0; i < n; i += 10 {
		appendN(t, l, min(10, n-i))
		if err := l.Checkpoint(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	return dir, pub, filepath.Join(dir, checkpointsName)
}

func TestVerifyDetectsTampering(t *testing.T) {
	// Lines: index i holds seq i+1; seq 1 is genesis, 2..21 are runs.
	const n = 20
	type tc struct {
		name   string
		edit   func(t *testing.T, lines [][]byte) [][]byte
		seq    uint64
		reason Reason
	}
	cases := []tc{
		{"one byte changed", func(t *testing.T, ls [][]byte) [][]byte {
			ls[9] = bytes.Replace(ls[9], []byte("report-"), []byte("rePort-"), 1)
			return ls
		}, 10, ReasonChanged},
		{"trace id changed", func(t *testing.T, ls [][]byte) [][]byte {
			ls[9] = bytes.Replace(ls[9], []byte(`"trace_id":"0`), []byte(`"trace_id":"1`), 1)
			return ls
		}, 10, ReasonChanged},
		{"hash member changed", func(t *testing.T, ls [][]byte) [][]byte {
			i := len(ls[9]) - 10
			ls[9][i] ^= 1
			return ls
		}, 10, ReasonChanged},
		{"record dropped", func(t *testing.T, ls [][]byte) [][]byte {
			return append(ls[:9], ls[10:]...)
		}, 10, ReasonMissing},
		{"several dropped", func(t *testing.T, ls [][]byte) [][]byte {
			return append(ls[:9], ls[13:]...)
		}, 10, ReasonMissing},
		{"two records swapped", func(t *testing.T, ls [][]byte) [][]byte {
			ls[9], ls[10] = ls[10], ls[9]
			return ls
		}, 10, ReasonReordered},
		{"record moved back", func(t *testing.T, ls [][]byte) [][]byte {
			moved := ls[5]
			ls = append(ls[:5], ls[6:]...)
			return append(ls[:12], append([][]byte{moved}, ls[12:]...)...)
		}, 6, ReasonReordered},
		{"record duplicated", func(t *testing.T, ls [][]byte) [][]byte {
			return append(ls[:10], append([][]byte{ls[9]}, ls[10:]...)...)
		}, 10, ReasonDuplicate},
		{"prev_hash edited", func(t *testing.T, ls [][]byte) [][]byte {
			i := bytes.Index(ls[9], []byte(`"prev_hash":"`)) + len(`"prev_hash":"`)
			ls[9][i] = flipHex(ls[9][i])
			return ls
		}, 10, ReasonChanged},
		{"prev_hash edited and rehashed", func(t *testing.T, ls [][]byte) [][]byte {
			ls[9], _ = reencode(t, ls[9], func(r *Record) { r.PrevHash = strings.Repeat("ab", 32) })
			return ls
		}, 10, ReasonBadLink},
		{"record forged and rehashed", func(t *testing.T, ls [][]byte) [][]byte {
			ls[9], _ = reencode(t, ls[9], func(r *Record) { r.Peer.UID = 0 })
			return ls
		}, 11, ReasonBadLink},
		{"foreign record inserted", func(t *testing.T, ls [][]byte) [][]byte {
			fake, _ := reencode(t, ls[9], func(r *Record) { r.Seq = 11; r.Event = EventSessionClose })
			return append(ls[:10], append([][]byte{fake}, ls[10:]...)...)
		}, 11, ReasonBadLink},
		{"not JSON", func(t *testing.T, ls [][]byte) [][]byte {
			ls[4] = []byte("hello\n")
			return ls
		}, 5, ReasonChanged},
		{"genesis replaced", func(t *testing.T, ls [][]byte) [][]byte {
			ls[0], _ = reencode(t, ls[0], func(r *Record) { r.Log.ID = strings.Repeat("cd", 32); r.PrevHash = r.Log.ID })
			return ls
		}, 2, ReasonBadLink},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openT(t, dir, Options{})
			appendN(t, l, n)
			l.Close()
			if _, err := Verify(dir, VerifyOptions{}); err != nil {
				t.Fatalf("intact log: %v", err)
			}
			writeLines(t, file1(dir), c.edit(t, readLines(t, file1(dir))))
			_, err := Verify(dir, VerifyOptions{})
			var te *TamperError
			if !errors.As(err, &te) || !errors.Is(err, ErrTampered) {
				t.Fatalf("Verify = %v, want a TamperError", err)
			}
			if te.Seq != c.seq || te.Reason != c.reason {
				t.Fatalf("got seq %d %q (%v), want seq %d %q", te.Seq, te.Reason, te, c.seq, c.reason)
			}
		})
	}
}

func flipHex(c byte) byte {
	if c == '0' {
		return '1'
	}
	return '0'
}

func TestVerifyMissingMiddleFile(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{RotateBytes: 4 << 10})
	appendN(t, l, 60)
	l.Close()
	files, _ := listFiles(dir)
	if len(files) < 4 {
		t.Fatalf("%d files", len(files))
	}
	lines := readLines(t, files[1].Path)
	first, _, _ := parseLine(bytes.TrimSuffix(lines[0], []byte("\n")))
	os.Remove(files[1].Path)
	_, err := Verify(dir, VerifyOptions{})
	if !isTamper(err, ReasonMissing, first.Seq) || !strings.Contains(err.Error(), "no file between") {
		t.Fatalf("Verify = %v, want missing seq %d", err, first.Seq)
	}
}

func TestCheckpoints(t *testing.T) {
	dir, pub, cpFile := signedLog(t, 30, Options{})
	cps, err := ReadCheckpoints(cpFile)
	if err != nil || len(cps) != 3 {
		t.Fatalf("%d checkpoints: %v", len(cps), err)
	}
	for _, c := range cps {
		if err := c.Verify(pub); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Verify(dir, VerifyOptions{PublicKey: pub, Checkpoints: cpFile})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.LogCheckpoints != 3 || rep.FileCheckpoints != 3 || !rep.SignaturesChecked {
		t.Fatalf("report %+v", rep)
	}

	// A wrong key fails, in the log and in the file.
	otherPath := filepath.Join(t.TempDir(), "other.key")
	other, _ := GenerateKey(otherPath)
	if _, err := Verify(dir, VerifyOptions{PublicKey: other}); !isTamper(err, ReasonBadSignature, 12) {
		t.Fatalf("wrong key, log: %v", err)
	}
	if _, err := Verify(dir, VerifyOptions{PublicKey: other, Checkpoints: cpFile}); !isTamper(err, ReasonBadSignature, 11) {
		t.Fatalf("wrong key, file: %v", err)
	}
	// LoadPublicKey reads the .pub file and the private key alike.
	for _, p := range []string{otherPath, otherPath + ".pub"} {
		k, err := LoadPublicKey(p)
		if err != nil || !k.Equal(other) {
			t.Fatalf("LoadPublicKey(%s): %v", p, err)
		}
	}
	if _, err := GenerateKey(otherPath); !errors.Is(err, os.ErrExist) {
		t.Fatalf("GenerateKey over an existing key: %v", err)
	}

	// A changed signature in the checkpoints file.
	b, _ := os.ReadFile(cpFile)
	bad := filepath.Join(t.TempDir(), "cp.jsonl")
	i := bytes.Index(b, []byte(`"sig":"`)) + len(`"sig":"`) + 3
	b2 := append([]byte{}, b...)
	if b2[i] == 'A' {
		b2[i] = 'B'
	} else {
		b2[i] = 'A'
	}
	os.WriteFile(bad, b2, 0o644)
	if _, err := Verify(dir, VerifyOptions{PublicKey: pub, Checkpoints: bad}); !isTamper(err, ReasonBadSignature, 11) {
		t.Fatalf("changed signature: %v", err)
	}
	// A checkpoints file needs the key.
	if _, err := Verify(dir, VerifyOptions{Checkpoints: cpFile}); err == nil || errors.Is(err, ErrTampered) {
		t.Fatalf("checkpoints without key: %v", err)
	}
}

func TestVerifyTruncatedAfterCheckpoint(t *testing.T) {
	dir, pub, cpFile := signedLog(t, 30, Options{})
	lines := readLines(t, file1(dir))
	// Cut the last 5 records (the final checkpoint among them); the chain
	// that is left is internally fine.
	writeLines(t, file1(dir), lines[:len(lines)-5])
	last := uint64(len(lines) - 5)
	if _, err := Verify(dir, VerifyOptions{PublicKey: pub}); err != nil {
		t.Fatalf("without the checkpoints file a cut tail is not detectable, got %v", err)
	}
	_, err := Verify(dir, VerifyOptions{PublicKey: pub, Checkpoints: cpFile})
	if !isTamper(err, ReasonTruncated, last+1) {
		t.Fatalf("Verify = %v, want truncated at seq %d", err, last+1)
	}
	// Everything gone.
	os.Remove(file1(dir))
	if _, err := Verify(dir, VerifyOptions{PublicKey: pub, Checkpoints: cpFile}); !isTamper(err, ReasonTruncated, 1) {
		t.Fatalf("log removed: %v", err)
	}
}

// Someone who rewrites a record and recomputes every later hash makes a
// chain that holds on its own; an earlier signed checkpoint exposes it.
func TestVerifyRewrittenChainAgainstCheckpoint(t *testing.T) {
	dir, pub, cpFile := signedLog(t, 30, Options{})
	lines := readLines(t, file1(dir))
	prev := ""
	var out [][]byte
	for i, ln := range lines {
		r, _, _ := parseLine(bytes.TrimSuffix(ln, []byte("\n")))
		if r.Event == EventCheckpoint {
			continue // the forger cannot sign, so drops them
		}
		line, h := reencode(t, ln, func(r *Record) {
			if i > 0 {
				r.PrevHash = prev
			}
			r.Seq = uint64(len(out) + 1)
			if r.Seq == 5 {
				r.Run.Args = []string{"--innocent"}
			}
		})
		out = append(out, line)
		prev = h
	}
	writeLines(t, file1(dir), out)
	if _, err := Verify(dir, VerifyOptions{PublicKey: pub}); err != nil {
		t.Fatalf("the rewritten chain holds on its own (the documented limit): %v", err)
	}
	cps, _ := ReadCheckpoints(cpFile)
	_, err := Verify(dir, VerifyOptions{PublicKey: pub, Checkpoints: cpFile})
	if !isTamper(err, ReasonCheckpoint, cps[0].Seq) {
		t.Fatalf("Verify = %v, want mismatch at checkpoint seq %d", err, cps[0].Seq)
	}
	// A log replaced by a fresh one (new log id) is caught too.
	kept := filepath.Join(t.TempDir(), "kept.jsonl")
	b, _ := os.ReadFile(cpFile)
	os.WriteFile(kept, b, 0o644)
	cpFile = kept
	os.RemoveAll(dir)
	l := openT(t, dir, Options{})
	appendN(t, l, 40)
	l.Close()
	if _, err := Verify(dir, VerifyOptions{PublicKey: pub, Checkpoints: cpFile}); !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), string(ReasonLogReplaced)) {
		t.Fatalf("replaced log: %v", err)
	}
}

func TestPeriodicCheckpoint(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(t.TempDir(), "k")
	pub, _ := GenerateKey(keyPath)
	priv, _ := LoadPrivateKey(keyPath)
	l := openT(t, dir, Options{SigningKey: priv, CheckpointEvery: 20 * time.Millisecond})
	appendN(t, l, 3)
	waitfor.True(t, "a periodic checkpoint", 5*time.Second, func() bool {
		cps, _ := ReadCheckpoints(filepath.Join(dir, checkpointsName))
		return len(cps) > 0
	})
	// No new records: no new checkpoints.
	seq, _ := l.Head()
	time.Sleep(100 * time.Millisecond)
	if s2, _ := l.Head(); s2 != seq {
		t.Fatalf("checkpoints written with nothing new: head %d -> %d", seq, s2)
	}
	l.Close()
	rep, err := Verify(dir, VerifyOptions{PublicKey: pub, Checkpoints: filepath.Join(dir, checkpointsName)})
	if err != nil || rep.LogCheckpoints != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
}

func TestCheckpointFileTornLine(t *testing.T) {
	dir, pub, cpFile := signedLog(t, 10, Options{})
	appendBytes(t, cpFile, []byte(`{"log_id":"ab`))
	if _, err := Verify(dir, VerifyOptions{PublicKey: pub, Checkpoints: cpFile}); err != nil {
		t.Fatalf("a torn last checkpoint line is ignored: %v", err)
	}
	if err := appendCheckpointFile(cpFile, &Checkpoint{LogID: "x"}); err != nil {
		t.Fatal(err)
	}
	cps, err := ReadCheckpoints(cpFile)
	if err != nil || cps[len(cps)-1].LogID != "x" {
		t.Fatalf("torn line not cut before appending: %v", err)
	}
}

func TestVerifyEmptyDir(t *testing.T) {
	if _, err := Verify(t.TempDir(), VerifyOptions{}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("%v", err)
	}
}

// Reopening and closing a log with nothing new adds no checkpoint.
func TestNoCheckpointWithoutNews(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(t.TempDir(), "k")
	if _, err := GenerateKey(key); err != nil {
		t.Fatal(err)
	}
	priv, _ := LoadPrivateKey(key)
	opts := Options{SigningKey: priv, CheckpointEvery: -1}
	l := openT(t, dir, opts)
	appendN(t, l, 3)
	l.Close()
	seq, _ := l.Head()
	l = openT(t, dir, opts)
	l.Close()
	if s2, _ := l.Head(); s2 != seq {
		t.Fatalf("reopen and close with nothing new moved the head %d -> %d", seq, s2)
	}
	cps, _ := ReadCheckpoints(filepath.Join(dir, checkpointsName))
	if len(cps) != 1 {
		t.Fatalf("%d checkpoints, want 1", len(cps))
	}
}
