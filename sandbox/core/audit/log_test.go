package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

func TestAppendAndVerify(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendN(t, l, 100)
	seq, head := l.Head()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.Records != 101 || rep.FirstSeq != 1 || rep.LastSeq != 101 || seq != 101 {
		t.Fatalf("report %+v, head seq %d; want 101 records (genesis + 100)", rep, seq)
	}
	if rep.Head != head || rep.LogID == "" || len(rep.Files) != 1 {
		t.Fatalf("report head %s files %v, log head %s", rep.Head, rep.Files, head)
	}
	// The genesis record anchors the chain to the log id.
	lines := readLines(t, file1(dir))
	g, _, err := parseLine(bytes.TrimSuffix(lines[0], []byte("\n")))
	if err != nil || g.Event != EventGenesis || g.PrevHash != g.Log.ID || g.Log.ID != rep.LogID || len(g.Log.ID) != 64 {
		t.Fatalf("genesis %+v err %v", g, err)
	}
}

func TestAppendFillsRecord(t *testing.T) {
	l := openT(t, t.TempDir(), Options{})
	defer l.Close()
	s, _ := runPair(1)
	s.Seq, s.Hash = 999, "bogus" // ignored: the log sets them
	before := time.Now()
	if err := l.Append(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	seq, h := l.Head()
	if s.Seq != 2 || s.Hash != h || seq != 2 || len(s.PrevHash) != 64 || s.PrevHash == l.LogID() {
		t.Fatalf("record seq %d hash %s prev %s; head %d %s", s.Seq, s.Hash, s.PrevHash, seq, h)
	}
	if s.Time.Location() != time.UTC || s.Time.Before(before.Add(-time.Second)) {
		t.Fatalf("time %v", s.Time)
	}
	if err := l.Append(context.Background(), &Record{Event: EventRotate}); err == nil {
		t.Fatal("callers must not be able to write audit.* records")
	}
	if err := l.Append(context.Background(), &Record{}); err == nil {
		t.Fatal("a record without event must be refused")
	}
}

// The line the writer assembles is exactly encoding/json's encoding of the
// whole Record, so the documented canonical form holds.
func TestLineIsEncodingJSON(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendN(t, l, 4)
	l.Close()
	for _, line := range readLines(t, file1(dir)) {
		r, _, err := parseLine(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), line) {
			t.Fatalf("line differs from encoding/json:\n%s\n%s", line, buf.Bytes())
		}
		if again, _ := reencode(t, line, nil); !bytes.Equal(again, line) {
			t.Fatalf("re-encoding is not stable:\n%s\n%s", line, again)
		}
	}
}

// A third-party verifier needs only byte operations and SHA-256; this one
// follows the package comment literally and shares no code with Verify.
func TestCanonicalFormByTheBook(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendN(t, l, 10)
	l.Close()
	suffix := regexp.MustCompile(`,"hash":"([0-9a-f]{64})"\}$`)
	prevRE := regexp.MustCompile(`,"prev_hash":"([0-9a-f]{64})"$`)
	var prev string
	for i, line := range readLines(t, file1(dir)) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		m := suffix.FindSubmatchIndex(line)
		if m == nil {
			t.Fatalf("line %d: no hash suffix", i)
		}
		canon := append(append([]byte{}, line[:m[0]]...), '}')
		sum := sha256.Sum256(canon)
		if got := hex.EncodeToString(sum[:]); got != string(line[m[2]:m[3]]) {
			t.Fatalf("line %d: hash %s, canonical form hashes to %s", i, line[m[2]:m[3]], got)
		}
		pm := prevRE.FindSubmatch(line[:m[0]])
		if pm == nil {
			t.Fatalf("line %d: prev_hash is not the last member before hash", i)
		}
		if i > 0 && string(pm[1]) != prev {
			t.Fatalf("line %d: prev_hash %s, previous hash %s", i, pm[1], prev)
		}
		prev = string(line[m[2]:m[3]])
	}
}

// Whatever a script or caller puts in a value, one record stays one line.
func TestNoForgedLines(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	nasty := []string{
		"line1\nline2",
		"cr\rreturn",
		"ls\u2028ps\u2029end",
		"\"}\n{\"seq\":3,\"event\":\"run.end\",\"prev_hash\":\"x\",\"hash\":\"y\"}\n",
		`{"seq":99,"event":"daemon.stop"}`,
		"nul\x00esc\x1b[31mred\x7f",
		"bad utf8 \xff\xfe",
		"<script>&amp;</script>",
		"tab\tvt\vff\f",
	}
	ctx := context.Background()
	for i, s := range nasty {
		r := &Record{Event: EventRunEnd, SessionID: s, Error: s, Run: &RunInfo{Script: s, Args: []string{s, s}, OutputsSkipped: []string{s}},
			Detail: map[string]string{s: s}, Outcome: OutcomeError}
		if err := l.Append(ctx, r); err != nil {
			t.Fatalf("value %d: %v", i, err)
		}
	}
	l.Close()
	raw, err := os.ReadFile(file1(dir))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(raw, []byte("\n")); n != len(nasty)+1 {
		t.Fatalf("%d lines for %d records", n, len(nasty)+1)
	}
	if bytes.ContainsAny(raw[:len(raw)-1], "\r\u2028\u2029\x00\x1b") || bytes.Contains(raw, []byte("\xff")) {
		t.Fatal("a raw control or line-separator character reached the file")
	}
	if _, err := Verify(dir, VerifyOptions{}); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	i := 0
	err = Read(dir, func(r *Record) error {
		if r.Event == EventGenesis {
			return nil
		}
		want := strings.ReplaceAll(nasty[i], "\xff\xfe", "\ufffd\ufffd") // one U+FFFD per bad byte
		if r.Error != want || r.Run.Args[1] != want || r.Detail[want] != want {
			t.Errorf("value %d came back as %q", i, r.Error)
		}
		i++
		return nil
	})
	if err != nil || i != len(nasty) {
		t.Fatalf("read %d records: %v", i, err)
	}
	// HTML characters stay readable.
	if !bytes.Contains(raw, []byte("<script>&amp;</script>")) {
		t.Fatal("<, > and & should not be escaped")
	}
}

func TestOneLineEscapesSeparators(t *testing.T) {
	got, err := oneLine([]byte("\"a\u2028b\u2029c\""))
	if err != nil || string(got) != `"a\u2028b\u2029c"` {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := oneLine([]byte("\"a\nb\"")); err == nil {
		t.Fatal("a raw newline must be refused")
	}
}

func TestRotationBySize(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{RotateBytes: 8 << 10})
	appendN(t, l, 120)
	l.Close()
	files, _ := listFiles(dir)
	if len(files) < 4 {
		t.Fatalf("only %d files", len(files))
	}
	// Each later file starts with a rotate record linked to the head of the
	// previous one.
	for i := 1; i < len(files); i++ {
		prevLines := readLines(t, files[i-1].Path)
		_, prevHash, err := parseLine(bytes.TrimSuffix(prevLines[len(prevLines)-1], []byte("\n")))
		if err != nil {
			t.Fatal(err)
		}
		first, _, err := parseLine(bytes.TrimSuffix(readLines(t, files[i].Path)[0], []byte("\n")))
		if err != nil {
			t.Fatal(err)
		}
		if first.Event != EventRotate || first.PrevHash != prevHash || first.Log.PrevFile != files[i-1].Name || first.Log.File != files[i].Name || first.Log.Reason != "size" {
			t.Fatalf("file %s starts with %+v / %+v", files[i].Name, first, first.Log)
		}
	}
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if len(rep.Files) != len(files) || rep.Records != 120+1+uint64(len(files)-1) {
		t.Fatalf("report: %d files, %d records", len(rep.Files), rep.Records)
	}
	// Reopen: writing continues in the last file, chain intact.
	l = openT(t, dir, Options{RotateBytes: 8 << 10})
	appendN(t, l, 30)
	l.Close()
	if _, err := Verify(dir, VerifyOptions{}); err != nil {
		t.Fatalf("Verify after reopen: %v", err)
	}
	// With the first file removed (retention), --partial accepts the rest.
	os.Remove(files[0].Path)
	if _, err := Verify(dir, VerifyOptions{}); !isTamper(err, ReasonMissing, 1) {
		t.Fatalf("first file removed: %v", err)
	}
	rep, err = Verify(dir, VerifyOptions{Partial: true})
	if err != nil || !rep.Partial || rep.FirstSeq == 1 {
		t.Fatalf("partial: %+v %v", rep, err)
	}
}

func TestRotationByAge(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	now := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l, err := openLog(dir, Options{RotateAge: time.Hour, Logger: quiet()}, osFS{}, clock)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3)
	mu.Lock()
	now = now.Add(61 * time.Minute)
	mu.Unlock()
	appendN(t, l, 3)
	l.Close()
	files, _ := listFiles(dir)
	if len(files) != 2 {
		t.Fatalf("%d files, want 2", len(files))
	}
	first, _, _ := parseLine(bytes.TrimSuffix(readLines(t, files[1].Path)[0], []byte("\n")))
	if first.Log.Reason != "age" {
		t.Fatalf("rotate reason %q", first.Log.Reason)
	}
	if _, err := Verify(dir, VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestTornLastLineRecovered(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendN(t, l, 10)
	l.Close()
	goodSize := fileSize(t, file1(dir))
	torn := []byte(`{"seq":12,"time":"2025-01-02T03:04:05Z","event":"run.st`)
	appendBytes(t, file1(dir), torn)

	// Before the writer reopens, Verify passes and notes the torn tail.
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil || rep.TornTail != len(torn) || rep.LastSeq != 11 {
		t.Fatalf("verify with torn tail: %+v %v", rep, err)
	}

	l = openT(t, dir, Options{})
	d := l.Recovered()
	if d == nil || d.Bytes != int64(len(torn)) || d.Offset != goodSize || d.File != fileName(1) {
		t.Fatalf("recovered %+v, want %d bytes at %d", d, len(torn), goodSize)
	}
	appendN(t, l, 5)
	l.Close()
	rep, err = Verify(dir, VerifyOptions{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if len(rep.Recoveries) != 1 || rep.Recoveries[0].Seq != 12 || rep.Recoveries[0].Bytes != int64(len(torn)) || rep.TornTail != 0 {
		t.Fatalf("recoveries %+v torn %d", rep.Recoveries, rep.TornTail)
	}
	sum := sha256.Sum256(torn)
	if rep.Recoveries[0].SHA256 != hex.EncodeToString(sum[:]) || rep.LastSeq != 17 {
		t.Fatalf("recovery %+v last %d", rep.Recoveries[0], rep.LastSeq)
	}
}

// A crash right after a rotation created the new file leaves it with no
// whole record; Open links it to the previous file again.
func TestTornNewFileAfterRotation(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendN(t, l, 5)
	l.Close()
	p2 := filepath.Join(dir, fileName(2))
	os.WriteFile(p2, []byte(`{"seq":7,"ti`), 0o640)
	l = openT(t, dir, Options{})
	if l.Recovered() == nil {
		t.Fatal("no recovery reported")
	}
	appendN(t, l, 2)
	l.Close()
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil || len(rep.Files) != 2 || len(rep.Recoveries) != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	// Also an empty new file (no bytes at all).
	os.WriteFile(filepath.Join(dir, fileName(3)), nil, 0o640)
	l = openT(t, dir, Options{})
	if l.Recovered() != nil {
		t.Fatal("nothing was dropped from an empty file")
	}
	appendN(t, l, 1)
	l.Close()
	if _, err := Verify(dir, VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesDamagedTail(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendN(t, l, 5)
	l.Close()
	lines := readLines(t, file1(dir))
	lines[len(lines)-1] = bytes.Replace(lines[len(lines)-1], []byte("report-"), []byte("REPORT-"), 1)
	writeLines(t, file1(dir), lines)
	_, err := Open(dir, Options{Logger: quiet()})
	if !errors.Is(err, ErrTampered) {
		t.Fatalf("Open on a changed last record: %v, want ErrTampered", err)
	}
}

func TestLock(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	if _, err := Open(dir, Options{Logger: quiet()}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("second writer: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	l.Close()
	if err := l.Append(context.Background(), &Record{Event: EventSessionCreate}); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("append after close: %v", err)
	}
	if err := l.Healthy(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("closed log healthy: %v", err)
	}
	l2 := openT(t, dir, Options{})
	l2.Close()
}

func TestConcurrentAppends(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{RotateBytes: 64 << 10})
	const workers, each = 32, 40
	var wg sync.WaitGroup
	seqs := make(chan uint64, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				s, e := runPair(w*each + i)
				r := s
				if i%2 == 1 {
					r = e
				}
				if err := l.Append(context.Background(), r); err != nil {
					t.Error(err)
					return
				}
				seqs <- r.Seq
			}
		}(w)
	}
	go func() {
		for i := 0; i < 20; i++ {
			l.Healthy()
			l.Head()
		}
	}()
	wg.Wait()
	close(seqs)
	l.Close()
	seen := map[uint64]bool{}
	for s := range seqs {
		if seen[s] {
			t.Fatalf("seq %d returned twice", s)
		}
		seen[s] = true
	}
	if len(seen) != workers*each {
		t.Fatalf("%d seqs", len(seen))
	}
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.Records != uint64(workers*each)+1+uint64(len(rep.Files)-1) {
		t.Fatalf("records %d files %d", rep.Records, len(rep.Files))
	}
}

func TestAppendContext(t *testing.T) {
	l := openT(t, t.TempDir(), Options{})
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Append(ctx, &Record{Event: EventSessionCreate}); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	if seq, _ := l.Head(); seq != 1 {
		t.Fatalf("a cancelled append was written: head %d", seq)
	}
}

func TestEnvSummary(t *testing.T) {
	names, h := EnvSummary(map[string]string{"B": "2", "A": "secret-value"})
	if strings.Join(names, ",") != "A,B" || len(h) != 64 {
		t.Fatalf("%v %s", names, h)
	}
	_, h2 := EnvSummary(map[string]string{"A": "secret-value", "B": "2"})
	_, h3 := EnvSummary(map[string]string{"A": "secret-valuE", "B": "2"})
	if h != h2 || h == h3 {
		t.Fatal("the hash must depend on values only through their content")
	}
	// Length prefixes: moving bytes between name and value changes the hash.
	_, x := EnvSummary(map[string]string{"AB": "C"})
	_, y := EnvSummary(map[string]string{"A": "BC"})
	if x == y {
		t.Fatal("ambiguous encoding")
	}
	if n, h := EnvSummary(nil); n != nil || h != "" {
		t.Fatal("empty env")
	}
	// Values never reach the log.
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	s, _ := runPair(1)
	l.Append(context.Background(), s)
	l.Close()
	raw, _ := os.ReadFile(file1(dir))
	if bytes.Contains(raw, []byte("s3cret")) || !bytes.Contains(raw, []byte(`"API_TOKEN"`)) {
		t.Fatal("env value stored or name missing")
	}
}

func TestProcessName(t *testing.T) {
	want, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip("no /proc")
	}
	if got := ProcessName(int32(os.Getpid())); got != strings.TrimSpace(string(want)) || got == "" {
		t.Fatalf("ProcessName = %q, want %q", got, want)
	}
	if ProcessName(0) != "" || ProcessName(-1) != "" {
		t.Fatal("no name for pid <= 0")
	}
}

func TestLimitsJSON(t *testing.T) {
	in := runtime.Limits{Timeout: 1500 * time.Millisecond, MemoryBytes: 1 << 20, CPUs: 0.5}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"timeout_ms":1500,"memory_bytes":1048576,"cpus":0.5}` {
		t.Fatalf("%s %v", b, err)
	}
	var out runtime.Limits
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("%+v %v", out, err)
	}
}

func fileSize(t testing.TB, p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func appendBytes(t testing.TB, p string, b []byte) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(b)
	f.Close()
}

func isTamper(err error, r Reason, seq uint64) bool {
	var te *TamperError
	return errors.As(err, &te) && te.Reason == r && te.Seq == seq && errors.Is(err, ErrTampered)
}
