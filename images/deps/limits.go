package deps

import (
	"archive/zip"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// A hostile package can be small to fetch and huge once installed (a
// compressible file in a wheel or tarball); and a chatty installer can print
// without end. The layer's size is bounded three times: what each wheel
// declares it unpacks to is summed before anything is installed; the
// install sandbox's /work and /tmp tmpfs are no larger than the cap, so the
// installer runs out of room while unpacking; and what is collected from
// /work/out is capped again. Installer output is kept as a bounded tail.

// DefaultMaxLayerBytes caps an installed layer when the config sets no
// dependencies.max_layer_bytes. The daemon holds a layer's files in memory
// while it copies them out of the install sandbox, so this also bounds what
// a build costs it.
const DefaultMaxLayerBytes = 1 << 30

// installSlack is room on the install sandbox's /tmp beyond the cap: pip
// stages a --target install there and keeps its own temporary files.
const installSlack = 64 << 20

// outputTail is how much of an installer's output is kept.
const outputTail = 64 << 10

// layerCap is the cap on this builder's layers.
func (b *Builder) layerCap() int64 {
	if b.MaxLayerBytes > 0 {
		return b.MaxLayerBytes
	}
	return DefaultMaxLayerBytes
}

// tooLarge is the error of a layer over the cap: what (the wheels, the
// installed tree) comes to size.
func (b *Builder) tooLarge(who, what, size string) error {
	return errkind.Errorf(ErrTooLarge, "%s: %s comes to %s, over the cap of %s on an installed layer (dependencies.max_layer_bytes); nothing was installed: drop or replace the package, or raise max_layer_bytes in the config's dependencies block if a layer this large is intended", who, what, size, humanSize(b.layerCap()))
}

// ranOutOfRoom is the error of an install stopped by the tmpfs cap.
func (b *Builder) ranOutOfRoom(who string) error {
	return errkind.Errorf(ErrTooLarge, "%s: the install grew past the cap of %s on an installed layer (dependencies.max_layer_bytes) while unpacking and was stopped; nothing was installed: drop or replace the package, or raise max_layer_bytes in the config's dependencies block if a layer this large is intended", who, humanSize(b.layerCap()))
}

// wheelSize is the unpacked size a wheel's zip directory declares. pip
// unpacks with Python's zipfile, which stops each member at its declared
// size, so a lying header cannot make a member larger.
func wheelSize(file string) (int64, error) {
	r, err := zip.OpenReader(file)
	if err != nil {
		return 0, errkind.Errorf(ErrRefused, "%s is not a valid wheel (zip): %w", file, err)
	}
	defer r.Close()
	var n int64
	for _, f := range r.File {
		n += int64(f.UncompressedSize64 & (1<<62 - 1))
	}
	return n, nil
}

// checkWheelSizes refuses wheels whose declared sizes together exceed the
// cap, before any is installed; it names the largest.
func (b *Builder) checkWheelSizes(who string, files map[string]string) error {
	var total, biggest int64
	big := ""
	for name, path := range files {
		n, err := wheelSize(path)
		if err != nil {
			return err
		}
		total += n
		if n > biggest {
			biggest, big = n, name
		}
	}
	if total > b.layerCap() {
		what := fmt.Sprintf("what the wheels unpack to (%d wheels; the largest, %s, %s)", len(files), big, humanSize(biggest))
		return b.tooLarge(who, what, humanSize(total))
	}
	return nil
}

// tailed wraps an install command so that only the tail of its output
// comes back (the runtime keeps a stream's head): the output goes to a file
// on the sandbox's bounded /tmp, and its last outputTail bytes are printed,
// after a line saying how much was cut. The command's exit status is kept.
func tailed(argv []string) []string {
	script := fmt.Sprintf(`"$@" >/tmp/.install.log 2>&1; s=$?
n=$(wc -c </tmp/.install.log)
if [ "$n" -gt %[1]d ]; then echo "[install output cut: the last %[1]d of $n bytes shown]" >&2; fi
tail -c %[1]d /tmp/.install.log >&2
exit $s`, outputTail)
	return append([]string{"/bin/sh", "-c", script, "sh"}, argv...)
}

// noSpace reports whether installer output says the sandbox's tmpfs ran
// out of room (pip: "[Errno 28] No space left on device"; tar likewise).
func noSpace(out string) bool {
	return strings.Contains(out, "No space left on device") || strings.Contains(out, "Errno 28") || strings.Contains(out, "ENOSPC")
}

// tailBuffer is an io.Writer keeping the last max bytes written to it and
// counting the rest, so that a chatty command's output costs a bounded
// amount of memory. It is safe for concurrent writes (stdout and stderr).
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	total int64
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

var _ io.Writer = (*tailBuffer)(nil)

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// String is the kept tail, preceded by a note when output was cut.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.total > int64(len(t.buf)) {
		return fmt.Sprintf("[output cut: %d of %d bytes dropped, the last %d kept]\n", t.total-int64(len(t.buf)), t.total, len(t.buf)) + string(t.buf)
	}
	return string(t.buf)
}

// humanSize renders n bytes in MiB or GiB, with the exact count.
func humanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB (%d bytes)", float64(n)/(1<<30), n)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	}
	return fmt.Sprintf("%d bytes", n)
}
