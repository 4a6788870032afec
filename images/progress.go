package images

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// BuildOptions say what a build reports and does beyond making the image.
type BuildOptions struct {
	// Progress receives the concise lines a person watches: one per stage
	// with its elapsed time, then a summary line. Nil discards them.
	Progress io.Writer
	// Log, when set, also receives mmdebstrap's full output as it comes
	// (`images build -v`). The full output of the latest build of each
	// image is kept in the store either way (Store.BuildLogPath).
	Log io.Writer
	// Unpack also unpacks the rootfs cache, as a stage of the build.
	Unpack bool
}

// failTailLines is how much of mmdebstrap's output a failed build's error
// carries; the whole of it is in the build log file.
const failTailLines = 40

// stageReporter prints one line per build stage: "[python] downloading and
// installing 27 packages and their dependencies… 439 packages, 380.2 MiB,
// 1m43s". When nothing else writes to
// the same stream (no verbose log) a stage's label is printed when it starts
// and completed with its time when it ends, so a terminal shows what is
// happening now; otherwise each stage is printed whole when it ends.
type stageReporter struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  string
	early   bool // print the label when the stage starts
	label   string
	start   time.Time
	open    bool   // the label is printed and its line not yet ended
	tempdir string // mmdebstrap's chroot, to count what it downloaded
	// packages is the recipe's package count; essential the size of the
	// essential set mmdebstrap downloaded first.
	packages, essential int
	now                 func() time.Time
}

func newStageReporter(w io.Writer, r *Recipe, early bool) *stageReporter {
	if w == nil {
		w = io.Discard
	}
	return &stageReporter{w: w, prefix: "[" + r.Name + "] ", packages: len(r.Packages), early: early, now: time.Now}
}

// begin ends the current stage (if any) and starts one called label.
func (s *stageReporter) begin(label string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked("")
	s.label, s.start = label, s.now()
	if s.early {
		fmt.Fprintf(s.w, "%s%s… ", s.prefix, label)
		s.open = true
	}
}

// end ends the current stage; detail (if any) goes before its time.
func (s *stageReporter) end(detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(detail)
}

func (s *stageReporter) endLocked(detail string) {
	if s.label == "" {
		return
	}
	took := formatElapsed(s.now().Sub(s.start))
	if detail != "" {
		took = detail + ", " + took
	}
	if s.open {
		fmt.Fprintln(s.w, took)
	} else {
		fmt.Fprintf(s.w, "%s%s… %s\n", s.prefix, s.label, took)
	}
	s.label, s.open = "", false
}

// note prints a line of its own (a warning) in the middle of a stage; the
// stage's line is then printed whole when it ends.
func (s *stageReporter) note(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open {
		fmt.Fprintln(s.w)
		s.open = false
	}
	fmt.Fprintln(s.w, s.prefix+line)
}

// done prints the closing line of a build.
func (s *stageReporter) done(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked("")
	fmt.Fprintf(s.w, s.prefix+format+"\n", args...)
}

// mmdebstrapLine follows the build through mmdebstrap's "I:" lines (the
// wording of mmdebstrap 1.x) and passes its warnings and errors on.
func (s *stageReporter) mmdebstrapLine(line string) {
	switch {
	case strings.HasPrefix(line, "I: using ") && strings.HasSuffix(line, " as tempdir"):
		s.mu.Lock()
		s.tempdir = strings.TrimSuffix(strings.TrimPrefix(line, "I: using "), " as tempdir")
		s.mu.Unlock()
	case strings.HasPrefix(line, "I: downloading packages"):
		s.begin("downloading the essential set")
	case strings.HasPrefix(line, "I: extracting archives"):
		n, size := s.downloaded()
		s.mu.Lock()
		s.essential = n
		s.mu.Unlock()
		s.end(packageCount(n, size))
		s.begin("installing the essential set")
	case strings.HasPrefix(line, "I: installing remaining packages"):
		s.begin(fmt.Sprintf("downloading and installing %d packages and their dependencies", s.packages))
	case strings.HasPrefix(line, "I: running --customize-hook"):
		// apt's cache still holds every package it downloaded.
		n, size := s.downloaded()
		s.mu.Lock()
		n -= s.essential
		s.mu.Unlock()
		s.end(packageCount(n, size))
	case strings.HasPrefix(line, "I: creating tarball"):
		s.begin("creating the rootfs tarball")
	case strings.HasPrefix(line, "W: "), strings.HasPrefix(line, "E: "):
		s.note(line)
	}
}

// downloaded counts the packages in the chroot's apt cache and their size.
func (s *stageReporter) downloaded() (n int, size int64) {
	s.mu.Lock()
	dir := s.tempdir
	s.mu.Unlock()
	if dir == "" {
		return 0, 0
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "var", "cache", "apt", "archives", "*.deb"))
	for _, d := range debs {
		if st, err := os.Stat(d); err == nil {
			size += st.Size()
		}
	}
	return len(debs), size
}

// packageCount says "412 packages, 380.2 MiB" ("" when unknown).
func packageCount(n int, size int64) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("%d packages, %s", n, HumanSize(size))
}

// formatElapsed is "12s" or "3m04s".
func formatElapsed(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%ds", int(d.Seconds()))
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

// lineWriter splits a command's output into lines (carriage returns too, so
// apt's progress never shows half-overwritten), sends each to log (with a
// prefix) and to onLine, and remembers the last lines for error messages.
type lineWriter struct {
	mu     sync.Mutex
	log    io.Writer
	prefix string
	onLine func(string)
	buf    []byte
	tail   []string
}

func newLineWriter(log io.Writer, prefix string, onLine func(string)) *lineWriter {
	if log == nil {
		log = io.Discard
	}
	return &lineWriter{log: log, prefix: prefix, onLine: onLine}
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexAny(l.buf, "\r\n")
		if i < 0 {
			break
		}
		l.emit(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

func (l *lineWriter) emit(line string) {
	line = strings.TrimRight(line, " \t")
	if line == "" {
		return
	}
	fmt.Fprintln(l.log, l.prefix+line)
	if l.onLine != nil {
		l.onLine(line)
	}
	l.tail = append(l.tail, line)
	if len(l.tail) > failTailLines {
		l.tail = l.tail[len(l.tail)-failTailLines:]
	}
}

// Flush emits a last line that had no newline.
func (l *lineWriter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit(string(l.buf))
		l.buf = nil
	}
}

// Tail is the last lines written, indented, for an error message.
func (l *lineWriter) Tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tail) == 0 {
		return "  (no output)"
	}
	return "  " + strings.Join(l.tail, "\n  ")
}
