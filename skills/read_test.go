package skills

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const secret = "TOP SECRET: outside the skill"

// confinementTree builds base/outside/secret.txt and a skill at base/skill
// holding every kind of escape attempt. It works without root: FIFOs and
// hardlinks to one's own files need no privilege.
func confinementTree(t testing.TB) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	outside = filepath.Join(base, "outside")
	root = filepath.Join(base, "skill")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(outside, 0o755))
	must(os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret), 0o644))
	must(os.WriteFile(filepath.Join(outside, "victim.txt"), []byte(secret), 0o644))
	must(os.MkdirAll(filepath.Join(root, "references", "deep"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "scripts"), 0o755))
	must(os.WriteFile(filepath.Join(root, "SKILL.md"), []byte("---\nname: skill\ndescription: x\n---\nbody\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "references", "guide.md"), []byte("# Guide\nhello\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "references", "deep", "note.txt"), []byte("deep"), 0o644))
	must(os.WriteFile(filepath.Join(root, "scripts", "bin.dat"), []byte{0xff, 0xfe, 0x00, 0x01}, 0o644))
	must(os.Symlink("references/guide.md", filepath.Join(root, "link-inside")))
	must(os.Symlink("../guide.md", filepath.Join(root, "references", "deep", "up-inside")))
	must(os.Symlink("../outside/secret.txt", filepath.Join(root, "link-rel-out")))
	must(os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "link-abs-out")))
	must(os.Symlink("/proc/self/root"+filepath.Join(outside, "secret.txt"), filepath.Join(root, "link-proc")))
	must(os.Symlink("/proc/self/cwd", filepath.Join(root, "link-proc-cwd")))
	must(os.Symlink("../outside", filepath.Join(root, "link-dir-out")))
	must(os.Symlink("loop-b", filepath.Join(root, "loop-a")))
	must(os.Symlink("loop-a", filepath.Join(root, "loop-b")))
	must(os.Symlink("../../../outside/secret.txt", filepath.Join(root, "references", "deep", "sneaky")))
	must(os.Link(filepath.Join(outside, "victim.txt"), filepath.Join(root, "hardlink")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	return root, outside
}

// withBothBackends runs f with openat2 and with the os.Root fallback.
func withBothBackends(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", f)
	t.Run("os.Root", func(t *testing.T) {
		noOpenat2.Store(true)
		defer noOpenat2.Store(false)
		f(t)
	})
}

func TestReadConfinement(t *testing.T) {
	root, outside := confinementTree(t)
	tests := []struct {
		rel  string
		want error  // nil = allowed
		text string // content when allowed
	}{
		{rel: "references/guide.md", text: "# Guide\nhello\n"},
		{rel: "./references//guide.md", text: "# Guide\nhello\n"},
		{rel: "link-inside", text: "# Guide\nhello\n"},
		{rel: "references/deep/up-inside", text: "# Guide\nhello\n"},
		{rel: "SKILL.md", text: "---\nname: skill\ndescription: x\n---\nbody\n"},
		{rel: "../outside/secret.txt", want: ErrEscape},
		{rel: "references/../../outside/secret.txt", want: ErrEscape},
		{rel: "references/../SKILL.md", want: ErrEscape}, // '..' refused outright
		{rel: filepath.Join(outside, "secret.txt"), want: ErrEscape},
		{rel: "/etc/passwd", want: ErrEscape},
		{rel: "/proc/self/root" + filepath.Join(outside, "secret.txt"), want: ErrEscape},
		{rel: "link-rel-out", want: ErrEscape},
		{rel: "link-abs-out", want: ErrEscape},
		{rel: "link-proc", want: ErrEscape},
		{rel: "link-proc-cwd/secret.txt", want: ErrEscape},
		{rel: "link-dir-out/secret.txt", want: ErrEscape},
		{rel: "references/deep/sneaky", want: ErrEscape},
		{rel: "loop-a", want: ErrEscape},
		{rel: "hardlink", want: ErrEscape},
		{rel: "fifo", want: ErrNotRegular},
		{rel: "references", want: ErrNotRegular},
		{rel: "references/", want: ErrNotRegular},
		{rel: "", want: ErrNotRegular},
		{rel: ".", want: ErrNotRegular},
		{rel: "references/guide.md\x00.png", want: ErrEscape},
		{rel: "\x00", want: ErrEscape},
		{rel: "missing.md", want: ErrNotFound},
		{rel: "references/guide.md/x", want: ErrNotFound},
	}
	withBothBackends(t, func(t *testing.T) {
		for _, tt := range tests {
			t.Run(strings.ReplaceAll(tt.rel, "/", "_"), func(t *testing.T) {
				done := make(chan struct{})
				var fc *FileContent
				var err error
				go func() {
					defer close(done)
					fc, err = ReadFile(root, tt.rel, ReadOptions{})
				}()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("ReadFile hung")
				}
				if tt.want == nil {
					if err != nil {
						t.Fatalf("ReadFile: %v", err)
					}
					if fc.Content != tt.text || fc.Encoding != "utf-8" {
						t.Errorf("content = %q (%s), want %q", fc.Content, fc.Encoding, tt.text)
					}
					return
				}
				if err == nil {
					t.Fatalf("ReadFile(%q) succeeded with %q, want %v", tt.rel, fc.Content, tt.want)
				}
				if !errors.Is(err, tt.want) {
					t.Errorf("err = %v, want %v", err, tt.want)
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error leaks content: %v", err)
				}
				f, oerr := OpenInRoot(root, tt.rel)
				if oerr == nil {
					f.Close()
					t.Errorf("OpenInRoot(%q) succeeded", tt.rel)
				}
			})
		}
	})
}

func TestReadFileRanges(t *testing.T) {
	root := t.TempDir()
	data := []byte("0123456789abcdef")
	os.WriteFile(filepath.Join(root, "f.txt"), data, 0o644)
	sum := sha256.Sum256(data)
	wantSum := hex.EncodeToString(sum[:])
	tests := []struct {
		name      string
		opts      ReadOptions
		content   string
		truncated bool
		err       error
	}{
		{name: "whole", opts: ReadOptions{}, content: string(data)},
		{name: "offset", opts: ReadOptions{Offset: 10}, content: "abcdef"},
		{name: "offset and length", opts: ReadOptions{Offset: 2, Length: 3}, content: "234", truncated: true},
		{name: "length past end", opts: ReadOptions{Offset: 14, Length: 10}, content: "ef"},
		{name: "offset at end", opts: ReadOptions{Offset: 16}, content: ""},
		{name: "cap truncates", opts: ReadOptions{MaxBytes: 4}, content: "0123", truncated: true},
		{name: "cap with offset", opts: ReadOptions{Offset: 4, MaxBytes: 4}, content: "4567", truncated: true},
		{name: "length above cap", opts: ReadOptions{Length: 5, MaxBytes: 4}, err: ErrTooLarge},
		{name: "offset past end", opts: ReadOptions{Offset: 17}, err: ErrRange},
		{name: "negative offset", opts: ReadOptions{Offset: -1}, err: ErrRange},
		{name: "negative length", opts: ReadOptions{Length: -1}, err: ErrRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc, err := ReadFile(root, "f.txt", tt.opts)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fc.Content != tt.content || fc.Truncated != tt.truncated || fc.Size != 16 || fc.SHA256 != wantSum || fc.Path != "f.txt" {
				t.Errorf("got %+v", fc)
			}
		})
	}
}

func TestReadFileEncoding(t *testing.T) {
	root := t.TempDir()
	bin := []byte{0xff, 0xfe, 0x00, 0x01, 'a'}
	os.WriteFile(filepath.Join(root, "bin.dat"), bin, 0o644)
	os.WriteFile(filepath.Join(root, "nul.txt"), []byte("a\x00b"), 0o644)
	os.WriteFile(filepath.Join(root, "ru.txt"), []byte("привет"), 0o644)

	fc, err := ReadFile(root, "bin.dat", ReadOptions{})
	if err != nil || fc.Encoding != "base64" {
		t.Fatalf("bin: %+v %v", fc, err)
	}
	if got, _ := base64.StdEncoding.DecodeString(fc.Content); !bytes.Equal(got, bin) {
		t.Errorf("base64 round trip = %x", got)
	}
	if fc, _ := ReadFile(root, "nul.txt", ReadOptions{}); fc.Encoding != "base64" {
		t.Errorf("NUL content encoding = %s", fc.Encoding)
	}
	// A cut through a two-byte letter backs off to the last whole one.
	fc, err = ReadFile(root, "ru.txt", ReadOptions{MaxBytes: 5})
	if err != nil || fc.Encoding != "utf-8" || fc.Content != "пр" || !fc.Truncated {
		t.Errorf("cut text: %+v %v", fc, err)
	}
}

func TestReadFileMissingRoot(t *testing.T) {
	_, err := ReadFile(filepath.Join(t.TempDir(), "gone"), "SKILL.md", ReadOptions{})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

// TestReadSymlinkSwapRace flips a directory between a real directory inside
// the root and a symlink to a directory outside it while readers hammer a
// path through it. Resolution happens in the kernel under RESOLVE_BENEATH
// (or os.Root's per-component walk), so no read may ever return the
// outside file.
func TestReadSymlinkSwapRace(t *testing.T) {
	if testing.Short() {
		t.Skip("race test takes seconds")
	}
	run := func(t *testing.T, d time.Duration) {
		base := t.TempDir()
		root := filepath.Join(base, "skill")
		outside := filepath.Join(base, "outside")
		os.MkdirAll(filepath.Join(root, "d"), 0o755)
		os.MkdirAll(outside, 0o755)
		os.WriteFile(filepath.Join(root, "d", "f"), []byte("inside"), 0o644)
		os.WriteFile(filepath.Join(outside, "f"), []byte(secret), 0o644)
		real, alt := filepath.Join(root, "d"), filepath.Join(root, "alt")
		os.Symlink(outside, alt)

		stop := make(chan struct{})
		var flips atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			exchange := true
			for {
				select {
				case <-stop:
					return
				default:
				}
				if exchange {
					if err := unix.Renameat2(unix.AT_FDCWD, real, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE); err == nil {
						flips.Add(1)
						continue
					}
					exchange = false // file system without RENAME_EXCHANGE
				}
				// Non-atomic fallback: move the directory away, put a link.
				os.Rename(real, real+".tmp")
				os.Symlink(outside, real)
				os.Remove(real)
				os.Rename(real+".tmp", real)
				flips.Add(1)
			}
		}()
		var ok, refused, leaks atomic.Int64
		deadline := time.Now().Add(d)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					fc, err := ReadFile(root, "d/f", ReadOptions{})
					switch {
					case err == nil && fc.Content == "inside":
						ok.Add(1)
					case err == nil:
						leaks.Add(1)
					default:
						refused.Add(1)
					}
					if f, err := OpenInRoot(root, "d/f"); err == nil {
						b := make([]byte, 64)
						n, _ := f.Read(b)
						f.Close()
						if string(b[:n]) != "inside" {
							leaks.Add(1)
						}
					}
				}
			}()
		}
		time.Sleep(d)
		close(stop)
		wg.Wait()
		t.Logf("flips=%d ok=%d refused=%d leaks=%d", flips.Load(), ok.Load(), refused.Load(), leaks.Load())
		if leaks.Load() != 0 {
			t.Fatalf("%d reads returned the outside file", leaks.Load())
		}
		if ok.Load() == 0 || refused.Load() == 0 || flips.Load() < 100 {
			t.Errorf("race not exercised: ok=%d refused=%d flips=%d", ok.Load(), refused.Load(), flips.Load())
		}
	}
	t.Run("openat2", func(t *testing.T) { run(t, 3*time.Second) })
	t.Run("os.Root", func(t *testing.T) {
		noOpenat2.Store(true)
		defer noOpenat2.Store(false)
		run(t, time.Second)
	})
}
