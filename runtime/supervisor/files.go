package supervisor

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/tarstream"
)

// The file ops' rules (the protocol is in protocol.go, "Files"):
//
//   - A directory is one of the file roots or beneath one, named by a
//     clean absolute path, and is reached through an os.Root opened at
//     its root: no "..", no symlink out of the root, whatever the job
//     left in it.
//   - A put is extracted strictly (tarstream.Extract) into a staging
//     directory of its own, 0700 and the agent's, at the top of the root,
//     so that a job of another uid can neither read nor change it; only
//     once the whole stream had the size and digest the host stated is it
//     moved into place, entry by entry with renameat relative to open
//     directories. A wrong digest, a stream too long or short, or an
//     unsafe entry leaves nothing behind. Moving into place merges: a
//     file or link there is replaced, a directory there is kept (its mode
//     and owner too) and filled; a directory where the stream has a file,
//     or the reverse, fails the put before anything is moved.
//   - put_data is fed to the extractor from the request loop through a
//     pipe, so a put's memory is one chunk, and a host that sends faster
//     than the disk takes is held back by its own connection.
//   - A collect streams from its own goroutine; clear too.

// fileRoots are the directories file requests may touch: the workdir and
// where skills are delivered. Tests point them elsewhere.
var fileRoots = []string{runtime.WorkDir, runtime.SkillMount, runtime.SkillsMount}

// Bounds of the agent's own, whatever a host asks.
var (
	// maxPutBytes bounds one put's stream.
	maxPutBytes int64 = 8 << 30
	// putIdleTimeout is how long a put waits for its next part before it
	// is given up (its staging removed).
	putIdleTimeout = time.Minute
)

// maxPuts bounds the puts in flight on one server.
const maxPuts = 8

// errPutLonger ends a put whose host sent more than it stated.
var errPutLonger = errors.New("the stream is longer than the put stated")

// errPutConnEnded ends a put whose connection ended.
var errPutConnEnded = errors.New("the connection that sent the put ended")

// errPutAbandoned ends a put whose host stopped sending its parts.
var errPutAbandoned = errors.New("the host sent no part of the stream for too long")

// fileState is a connection's puts in flight: a put is its connection's,
// and is given up when the connection ends.
type fileState struct {
	mu   sync.Mutex
	puts map[uint64]*putStream
}

func (c *conn) files() *fileState {
	c.filesOnce.Do(func() { c.filesState = &fileState{puts: map[uint64]*putStream{}} })
	return c.filesState
}

// abortPuts gives up c's puts in flight (c ended): nothing of them is put
// in place.
func (c *conn) abortPuts() {
	fs := c.files()
	fs.mu.Lock()
	puts := fs.puts
	fs.puts = map[uint64]*putStream{}
	fs.mu.Unlock()
	for _, p := range puts {
		p.timer.Stop()
		p.pw.CloseWithError(errPutConnEnded)
	}
}

// putStream is a put whose stream is still coming.
type putStream struct {
	pw    *io.PipeWriter
	got   int64
	size  int64
	timer *time.Timer
}

// handleFile serves one file request (handle's dispatch).
func (c *conn) handleFile(req Request) {
	switch req.Op {
	case OpPut:
		c.putBegin(req)
	case OpPutData:
		c.putData(req)
	case OpCollect:
		go c.collect(req)
	case OpClear:
		go c.clear(req)
	}
}

func (c *conn) fileError(seq uint64, err error) {
	c.send(Event{Ev: EvError, Seq: seq, Error: err.Error()})
}

func (c *conn) putBegin(req Request) {
	fs := c.files()
	fs.mu.Lock()
	if fs.puts[req.Seq] != nil {
		fs.mu.Unlock()
		c.fileError(req.Seq, fmt.Errorf("put: seq %d is a put in flight", req.Seq))
		return
	}
	if len(fs.puts) >= maxPuts {
		fs.mu.Unlock()
		c.fileError(req.Seq, fmt.Errorf("put into %s: %d puts in flight, at most %d", req.Dir, maxPuts, maxPuts))
		return
	}
	pr, pw := io.Pipe()
	p := &putStream{pw: pw, size: req.Size}
	seq := req.Seq
	p.timer = time.AfterFunc(putIdleTimeout, func() {
		fs.mu.Lock()
		if fs.puts[seq] == p {
			delete(fs.puts, seq)
		}
		fs.mu.Unlock()
		pw.CloseWithError(errPutAbandoned)
	})
	fs.puts[seq] = p
	fs.mu.Unlock()
	go func() {
		n, err := c.s.put(req, pr)
		pr.CloseWithError(io.ErrClosedPipe) // what the host still sends is dropped
		if err != nil {
			c.fileError(seq, fmt.Errorf("put into %s: %w", req.Dir, err))
			return
		}
		c.send(Event{Ev: EvPut, Seq: seq, FileEvent: FileEvent{Entries: n.Entries, Size: req.Size}})
	}()
	c.feed(seq, p, req.Data, req.More)
}

func (c *conn) putData(req Request) {
	fs := c.files()
	fs.mu.Lock()
	p := fs.puts[req.Seq]
	fs.mu.Unlock()
	if p == nil {
		c.fileError(req.Seq, fmt.Errorf("put_data: seq %d is no put in flight (it ended, or was given up after %v without a part)", req.Seq, putIdleTimeout))
		return
	}
	c.feed(req.Seq, p, req.Data, req.More)
}

// feed hands one part of a put's stream to its extractor (which answers
// for the put: a write that fails is a put that failed already).
func (c *conn) feed(seq uint64, p *putStream, data []byte, more bool) {
	p.timer.Reset(putIdleTimeout)
	if p.got += int64(len(data)); p.got > p.size {
		p.pw.CloseWithError(errPutLonger)
	} else if len(data) > 0 {
		_, _ = p.pw.Write(data)
	}
	if more {
		return
	}
	p.timer.Stop()
	_ = p.pw.Close()
	fs := c.files()
	fs.mu.Lock()
	if fs.puts[seq] == p {
		delete(fs.puts, seq)
	}
	fs.mu.Unlock()
}

// openFileDir is the root dir is under and dir's path relative to it.
func openFileDir(dir string) (*os.Root, string, error) {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return nil, "", fmt.Errorf("%q is not a clean absolute path", truncate(dir))
	}
	for _, r := range fileRoots {
		rel, ok := "", false
		switch {
		case dir == r:
			rel, ok = ".", true
		case strings.HasPrefix(dir, r+"/"):
			rel, ok = dir[len(r)+1:], true
		}
		if !ok {
			continue
		}
		root, err := os.OpenRoot(r)
		if err != nil {
			return nil, "", fmt.Errorf("open %s: %w", r, err)
		}
		return root, rel, nil
	}
	return nil, "", fmt.Errorf("%s is not under %s, the directories files may be put into, collected from or cleared", dir, strings.Join(fileRoots, ", "))
}

// put extracts req's stream, read from r, into staging and moves it into
// place once its size and digest are the stated ones.
func (s *server) put(req Request, r io.Reader) (tarstream.Extracted, error) {
	if req.Size > maxPutBytes {
		return tarstream.Extracted{}, fmt.Errorf("a stream of %d bytes, at most %d", req.Size, maxPutBytes)
	}
	root, rel, err := openFileDir(req.Dir)
	if err != nil {
		return tarstream.Extracted{}, err
	}
	defer root.Close()
	stageName, stage, err := makeStaging(root)
	if err != nil {
		return tarstream.Extracted{}, err
	}
	defer func() {
		stage.Close()
		_ = root.RemoveAll(stageName)
	}()
	h := sha256.New()
	br := tarstream.Bounded(io.TeeReader(r, h), req.Size)
	counted := &countReader{r: br}
	n, xerr := tarstream.Extract(counted, stage, tarstream.ExtractOptions{ReadOnly: req.ReadOnly})
	// The stream's trailer and padding, past where tar stops reading.
	_, rerr := io.Copy(io.Discard, counted)
	switch {
	case errors.Is(xerr, tarstream.ErrOver) || errors.Is(rerr, tarstream.ErrOver) || errors.Is(xerr, errPutLonger) || errors.Is(rerr, errPutLonger):
		return n, fmt.Errorf("the stream is longer than the %d bytes the put stated: nothing was put", req.Size)
	case errors.Is(rerr, errPutAbandoned) || errors.Is(xerr, errPutAbandoned):
		return n, fmt.Errorf("%w: nothing was put", errPutAbandoned)
	case rerr != nil && xerr == nil:
		return n, fmt.Errorf("read the stream: %w: nothing was put", rerr)
	case counted.n != req.Size:
		return n, fmt.Errorf("the stream ended after %d of the %d bytes the put stated: nothing was put", counted.n, req.Size)
	}
	if got := tarstream.DigestPrefix + hex.EncodeToString(h.Sum(nil)); got != req.Digest {
		return n, fmt.Errorf("the stream's digest is %s, the put stated %s: nothing was put", got, req.Digest)
	}
	if xerr != nil {
		return n, fmt.Errorf("%w: nothing was put", xerr)
	}
	// In place.
	mode := os.FileMode(0o755)
	if req.ReadOnly {
		mode = 0o555
	}
	if err := root.MkdirAll(rel, mode); err != nil {
		return n, fmt.Errorf("make %s: %w", req.Dir, err)
	}
	dst, err := root.Open(rel)
	if err != nil {
		return n, fmt.Errorf("open %s: %w", req.Dir, err)
	}
	defer dst.Close()
	src, err := stage.Open(".")
	if err != nil {
		return n, fmt.Errorf("open the staging directory: %w", err)
	}
	defer src.Close()
	if err := mergeDirs(src, dst, ".", false); err != nil {
		return n, fmt.Errorf("%w: nothing was put", err)
	}
	if src, err = reopen(src); err != nil {
		return n, err
	}
	if err := mergeDirs(src, dst, ".", true); err != nil {
		return n, fmt.Errorf("move into place (some entries may be there): %w", err)
	}
	if req.ReadOnly {
		// The directory itself too (a volume's root is open to all):
		// nothing can be added beside the files put.
		if err := dst.Chmod(0o555); err != nil {
			return n, fmt.Errorf("make %s read-only: %w", req.Dir, err)
		}
	}
	return n, nil
}

// makeStaging makes a staging directory at the top of root, 0700, and
// checks that what it opens is that directory (a job that can write the
// root could have put a link or a directory of its own there).
func makeStaging(root *os.Root) (string, *os.Root, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := ".skillbox-put-" + hex.EncodeToString(b)
	if err := root.Mkdir(name, 0o700); err != nil {
		return "", nil, fmt.Errorf("make a staging directory: %w", err)
	}
	stage, err := root.OpenRoot(name)
	if err != nil {
		_ = root.RemoveAll(name)
		return "", nil, fmt.Errorf("open the staging directory: %w", err)
	}
	f, err := stage.Open(".")
	var st unix.Stat_t
	if err == nil {
		err = unix.Fstat(int(f.Fd()), &st)
		f.Close()
	}
	if err == nil && (st.Uid != uint32(os.Geteuid()) || st.Mode&0o7777 != 0o700) {
		err = errors.New("it is not the directory just made")
	}
	if err != nil {
		stage.Close()
		return "", nil, fmt.Errorf("the staging directory %s: %w", name, err)
	}
	return name, stage, nil
}

// reopen is f opened again, read from its start.
func reopen(f *os.File) (*os.File, error) {
	fd, err := unix.Openat(int(f.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("open the staging directory again: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// mergeDirs moves src's entries into dst (move set), or checks that they
// can be moved (move unset): a file or link replaces one, a directory
// fills one that is there, and a directory where the other has a file is
// a conflict. Nothing is followed: every lookup is relative to an open
// directory, without following a link.
func mergeDirs(src, dst *os.File, rel string, move bool) error {
	names, err := src.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", rel, err)
	}
	sfd, dfd := int(src.Fd()), int(dst.Fd())
	for _, n := range names {
		name := filepath.Join(rel, n)
		var ss, ds unix.Stat_t
		if err := unix.Fstatat(sfd, n, &ss, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		err := unix.Fstatat(dfd, n, &ds, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			if move {
				if err := unix.Renameat(sfd, n, dfd, n); err != nil {
					return fmt.Errorf("move %s into place: %w", name, err)
				}
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		sdir, ddir := ss.Mode&unix.S_IFMT == unix.S_IFDIR, ds.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case sdir && ddir:
			if err := mergeSub(sfd, dfd, n, name, move); err != nil {
				return err
			}
		case sdir:
			return fmt.Errorf("%s: a directory in the stream, and something else that is not one there", name)
		case ddir:
			return fmt.Errorf("%s: a directory there, and a file or link in the stream", name)
		case move:
			if err := unix.Renameat(sfd, n, dfd, n); err != nil {
				return fmt.Errorf("move %s into place: %w", name, err)
			}
		}
	}
	return nil
}

func mergeSub(sfd, dfd int, n, name string, move bool) error {
	open := func(fd int) (*os.File, error) {
		d, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		return os.NewFile(uintptr(d), name), nil
	}
	s, err := open(sfd)
	if err != nil {
		return err
	}
	defer s.Close()
	d, err := open(dfd)
	if err != nil {
		return err
	}
	defer d.Close()
	return mergeDirs(s, d, name, move)
}

// countReader counts what is read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// collect streams a tar of req.Dir back in collect_data events.
func (c *conn) collect(req Request) {
	fail := func(err error) { c.fileError(req.Seq, fmt.Errorf("collect %s: %w", req.Dir, err)) }
	root, rel, err := openFileDir(req.Dir)
	if err != nil {
		fail(err)
		return
	}
	defer root.Close()
	dir, err := root.Open(rel)
	if err != nil {
		fail(err)
		return
	}
	defer dir.Close()
	if fi, err := dir.Stat(); err != nil || !fi.IsDir() {
		fail(errors.New("not a directory"))
		return
	}
	h := sha256.New()
	cw := &chunkSender{c: c, seq: req.Seq, h: h}
	bw := bufio.NewWriterSize(cw, OutputChunk)
	wr, err := tarstream.WriteDir(bw, dir, req.MaxBytes)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		fail(err)
		return
	}
	notes := wr.Notes
	for i, n := range notes {
		if len(n) > maxFileNoteLen {
			notes[i] = strings.ToValidUTF8(n[:maxFileNoteLen-3], "") + "..."
		}
	}
	omitted := wr.Omitted
	if len(omitted) > maxFileOmitted {
		omitted = strings.ToValidUTF8(omitted[:maxFileOmitted-3], "") + "..."
	}
	c.send(Event{Ev: EvCollected, Seq: req.Seq, FileEvent: FileEvent{
		Size: cw.n, Entries: wr.Entries, Digest: tarstream.DigestPrefix + hex.EncodeToString(h.Sum(nil)),
		Truncated: wr.Truncated, Omitted: omitted, Notes: notes,
	}})
}

// chunkSender sends what is written to it as collect_data events.
type chunkSender struct {
	c   *conn
	seq uint64
	h   hash.Hash
	n   int64
}

func (c *chunkSender) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		k := min(len(rest), OutputChunk)
		c.c.send(Event{Ev: EvCollectData, Seq: c.seq, Data: rest[:k]})
		rest = rest[k:]
	}
	select {
	case <-c.c.dead:
		return 0, errors.New("the host went away")
	default:
	}
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

// clear removes every entry in req.Dir.
func (c *conn) clear(req Request) {
	n, err := clearDir(req.Dir)
	if err != nil {
		c.fileError(req.Seq, fmt.Errorf("clear %s: %w", req.Dir, err))
		return
	}
	c.send(Event{Ev: EvCleared, Seq: req.Seq, FileEvent: FileEvent{Entries: n}})
}

func clearDir(dir string) (int, error) {
	root, rel, err := openFileDir(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	d, err := root.OpenRoot(rel)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	f, err := d.Open(".")
	if err != nil {
		return 0, err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return 0, err
	}
	for i, n := range names {
		if err := d.RemoveAll(n); err != nil {
			return i, fmt.Errorf("remove %s: %w", n, err)
		}
	}
	return len(names), nil
}
