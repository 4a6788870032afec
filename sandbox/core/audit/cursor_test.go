package audit

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// advanceT advances c and returns how many records it handed on.
func advanceT(t *testing.T, c *Cursor) int {
	t.Helper()
	n := 0
	if err := c.Advance(func(*Entry) error { n++; return nil }); err != nil {
		t.Fatalf("Advance: %v", err)
	}
	return n
}

// tamperLine changes one byte of the n-th line (from 1) of the file.
func tamperLine(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	i := bytes.Index(lines[n-1], []byte(`"sess_`))
	if i < 0 {
		t.Fatalf("line %d of %s has no session to change", n, path)
	}
	lines[n-1][i+2] = 'E'
	if err := os.WriteFile(path, bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCursorIncremental(t *testing.T) {
	t.Run("append reads only what is new", func(t *testing.T) {
		dir := t.TempDir()
		l := openT(t, dir, Options{})
		appendN(t, l, 10)
		c := NewCursor(dir)
		if n := advanceT(t, c); n != 11 {
			t.Fatalf("first advance: %d records, want 11", n)
		}
		appendN(t, l, 4)
		if n := advanceT(t, c); n != 4 {
			t.Fatalf("second advance: %d records, want 4", n)
		}
		if n := advanceT(t, c); n != 0 {
			t.Fatalf("third advance: %d records, want 0", n)
		}
		l.Close()
		advanceT(t, c)
		rep, err := Verify(dir, VerifyOptions{})
		if err != nil || c.Failure() != nil || c.Report().Records != rep.Records || c.Report().Head != rep.Head {
			t.Fatalf("cursor %+v %v, Verify %+v %v", c.Report(), c.Failure(), rep, err)
		}
	})
	t.Run("follows rotation", func(t *testing.T) {
		dir := t.TempDir()
		l := openT(t, dir, Options{RotateBytes: 2048})
		appendN(t, l, 5)
		c := NewCursor(dir)
		first := advanceT(t, c)
		appendN(t, l, 30)
		l.Close()
		second := advanceT(t, c)
		files, _ := listFiles(dir)
		rep, err := Verify(dir, VerifyOptions{})
		if len(files) < 3 || err != nil || c.Failure() != nil || uint64(first+second) != rep.Records || c.Report().Head != rep.Head {
			t.Fatalf("%d files; cursor %d+%d %v; Verify %+v %v", len(files), first, second, c.Failure(), rep, err)
		}
		if f, _, seq, _ := c.Position(); f != files[len(files)-1].Name || seq != rep.LastSeq {
			t.Fatalf("position %s seq %d, want %s seq %d", f, seq, files[len(files)-1].Name, rep.LastSeq)
		}
	})
	t.Run("retention makes it start over", func(t *testing.T) {
		dir := t.TempDir()
		l := openT(t, dir, Options{RotateBytes: 2048})
		appendN(t, l, 30)
		l.Close()
		c := NewCursor(dir)
		advanceT(t, c)
		files, _ := listFiles(dir)
		os.Remove(files[0].Path)
		if err := c.Advance(func(*Entry) error { return nil }); !errors.Is(err, ErrRebuild) {
			t.Fatalf("after removing the first file: %v, want ErrRebuild", err)
		}
		c = NewCursor(dir)
		advanceT(t, c)
		if c.Failure() != nil || !c.Report().Partial {
			t.Fatalf("a new cursor after retention: %v %+v", c.Failure(), c.Report())
		}
	})
	t.Run("tamper after the verified position is found", func(t *testing.T) {
		dir := t.TempDir()
		l := openT(t, dir, Options{})
		appendN(t, l, 6)
		c := NewCursor(dir)
		advanceT(t, c)
		appendN(t, l, 6)
		l.Close()
		files, _ := listFiles(dir)
		tamperLine(t, files[0].Path, 10)
		n := advanceT(t, c)
		if c.Failure() == nil || c.Failure().Reason != ReasonChanged || c.Failure().Line != 10 {
			t.Fatalf("finding %v, want a changed record at line 10", c.Failure())
		}
		if n != 6 {
			t.Fatalf("%d records handed on after the finding, want all 6", n)
		}
	})
	t.Run("tamper before the verified position needs a full verify", func(t *testing.T) {
		dir := t.TempDir()
		l := openT(t, dir, Options{})
		appendN(t, l, 8)
		c := NewCursor(dir)
		advanceT(t, c)
		appendN(t, l, 2)
		files, _ := listFiles(dir)
		// A rewrite behind the cursor that also grows the file looks like
		// an append: the incremental check does not see it.
		tamperLine(t, files[0].Path, 3)
		appendN(t, l, 1)
		l.Close()
		if err := c.Advance(func(*Entry) error { return nil }); err != nil || c.Failure() != nil {
			t.Fatalf("incremental: %v %v, want no finding", err, c.Failure())
		}
		res, err := VerifyAll(dir, VerifyOptions{Partial: true})
		if err != nil || len(res) != 1 || res[0].Failure == nil || res[0].Failure.Line != 3 {
			t.Fatalf("full verify: %+v %v, want a finding at line 3", res, err)
		}
	})
	t.Run("rewrite in place without growing starts over", func(t *testing.T) {
		dir := t.TempDir()
		l := openT(t, dir, Options{})
		appendN(t, l, 8)
		l.Close()
		c := NewCursor(dir)
		advanceT(t, c)
		files, _ := listFiles(dir)
		st, _ := os.Stat(files[0].Path)
		tamperLine(t, files[0].Path, 3)
		os.Chtimes(files[0].Path, st.ModTime(), st.ModTime().Add(1e9))
		if err := c.Advance(func(*Entry) error { return nil }); !errors.Is(err, ErrRebuild) {
			t.Fatalf("after a same-size rewrite: %v, want ErrRebuild", err)
		}
		c = NewCursor(dir)
		advanceT(t, c)
		if c.Failure() == nil || c.Failure().Line != 3 {
			t.Fatalf("a new cursor: %v, want the finding at line 3", c.Failure())
		}
	})
	t.Run("torn tail waits", func(t *testing.T) {
		dir := t.TempDir()
		l := openT(t, dir, Options{})
		appendN(t, l, 3)
		l.Close()
		files, _ := listFiles(dir)
		f, _ := os.OpenFile(files[0].Path, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(`{"seq":5,"ti`)
		f.Close()
		c := NewCursor(dir)
		if n := advanceT(t, c); n != 4 || c.Failure() != nil || c.Report().TornTail == 0 {
			t.Fatalf("%d records, %v, torn %d", n, c.Failure(), c.Report().TornTail)
		}
	})
}
