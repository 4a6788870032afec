package siem

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Sink receives mapped records, one at a time, in order.
type Sink interface {
	// Write hands over one record; it may be buffered until Flush.
	Write(Message) error
	// Flush makes every record written so far durable where the sink can
	// (a file: written and fsynced).
	Flush() error
	Close() error
}

var (
	_ Sink = (*StreamSink)(nil)
	_ Sink = (*FileSink)(nil)
	_ Sink = (*SyslogSink)(nil)
)

// Destination says where records go: Output, a file ("-" or "" for
// Stdout), or Syslog, an address for DialSyslog; not both.
type Destination struct {
	Output string
	Syslog string
	Stdout io.Writer
	// Append keeps what Output holds (a follow) instead of starting it
	// anew (an export).
	Append bool
}

// DestinationError is OpenSink's error for a destination given wrongly
// (rather than one that could not be opened): a usage error.
type DestinationError struct{ Err error }

func (e *DestinationError) Error() string { return e.Err.Error() }
func (e *DestinationError) Unwrap() error { return e.Err }

// OpenSink opens the sink for d.
func OpenSink(d Destination) (Sink, error) {
	switch {
	case d.Output != "" && d.Syslog != "":
		return nil, &DestinationError{errors.New("give --output or --syslog, not both")}
	case d.Syslog != "":
		if _, _, err := ParseSyslogAddr(d.Syslog); err != nil {
			return nil, &DestinationError{err}
		}
		return DialSyslog(d.Syslog)
	case d.Output != "" && d.Output != "-":
		return OpenFile(d.Output, d.Append)
	}
	return NewStreamSink(d.Stdout), nil
}

// StreamSink writes records as JSON lines to a stream (stdout).
type StreamSink struct {
	w *bufio.Writer
}

// NewStreamSink writes to w; closing the sink does not close w.
func NewStreamSink(w io.Writer) *StreamSink {
	return &StreamSink{w: bufio.NewWriterSize(w, 256<<10)}
}

func (s *StreamSink) Write(m Message) error {
	s.w.Write(m.Body)
	return s.w.WriteByte('\n')
}

func (s *StreamSink) Flush() error { return s.w.Flush() }
func (s *StreamSink) Close() error { return s.w.Flush() }

// FileSink writes records as JSON lines to a file. Flush writes and
// fsyncs them. Before writing it checks the path still names the file it
// has open and reopens it if not, so a log rotator may move the file away
// (or remove it) at any time: records go to the new file from then on. A
// rotator that copies and truncates instead is fine too: writes append.
type FileSink struct {
	path string
	f    *os.File
	w    *bufio.Writer
}

// OpenFile opens path for a FileSink, creating it (mode 0640) if needed;
// with appendTo it keeps what is there, else it starts the file empty.
func OpenFile(path string, appendTo bool) (*FileSink, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if !appendTo {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o640)
	if err != nil {
		return nil, fmt.Errorf("opening the export file: %w", err)
	}
	if err := syncDir(path); err != nil {
		f.Close()
		return nil, err
	}
	s := &FileSink{path: path, f: f}
	s.w = bufio.NewWriterSize(f, 256<<10)
	return s, nil
}

// syncDir fsyncs the directory holding path, so a file just created there
// survives a crash along with what is written to it.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("syncing the directory of %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing the directory of %s: %w", path, err)
	}
	return nil
}

func (s *FileSink) Write(m Message) error {
	if s.w.Buffered() == 0 {
		if err := s.reopenIfMoved(); err != nil {
			return err
		}
	}
	s.w.Write(m.Body)
	if err := s.w.WriteByte('\n'); err != nil {
		return fmt.Errorf("writing %s: %w", s.path, err)
	}
	return nil
}

// reopenIfMoved opens the path anew (appending) when it no longer names
// the open file.
func (s *FileSink) reopenIfMoved() error {
	cur, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("checking %s: %w", s.path, err)
	}
	st, err := os.Stat(s.path)
	if err == nil && os.SameFile(cur, st) {
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("checking %s: %w", s.path, err)
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("reopening %s after it was moved: %w", s.path, err)
	}
	if err := syncDir(s.path); err != nil {
		f.Close()
		return err
	}
	s.f.Close()
	s.f = f
	s.w.Reset(f)
	return nil
}

func (s *FileSink) Flush() error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", s.path, err)
	}
	return nil
}

func (s *FileSink) Close() error {
	err := s.Flush()
	if cerr := s.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing %s: %w", s.path, cerr)
	}
	return err
}
