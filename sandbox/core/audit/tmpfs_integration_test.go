//go:build integration

package audit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFailClosedFullDisk fills a real 64 KiB tmpfs under the log: appends
// must fail with ErrUnavailable and leave no half line, Healthy must say why,
// and once space is freed the next append works and the log verifies.
func TestFailClosedFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs; run 'sudo go test -tags integration ./sandbox/core/audit/'")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0750"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v)", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })

	l := openT(t, dir, Options{RetryEvery: 1 << 62})
	defer l.Close()
	appendN(t, l, 5)

	// Take most of the space with a filler, then append until it fails.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	os.Truncate(filler, fileSize(t, filler)-3000) // leave room for about two records

	var failErr error
	for i := 0; i < 50; i++ {
		s, _ := runPair(i)
		if err := l.Append(context.Background(), s); err != nil {
			failErr = err
			break
		}
	}
	if !errors.Is(failErr, ErrUnavailable) || !errors.Is(failErr, syscall.ENOSPC) {
		t.Fatalf("append on a full tmpfs: %v, want ErrUnavailable wrapping ENOSPC", failErr)
	}
	h := l.Healthy()
	if !errors.Is(h, ErrUnavailable) || !strings.Contains(h.Error(), "no space left on device") {
		t.Fatalf("Healthy = %v", h)
	}
	// No half line on disk.
	if _, err := Verify(dir, VerifyOptions{}); err != nil {
		t.Fatalf("Verify on the full disk: %v", err)
	}
	rep, _ := Verify(dir, VerifyOptions{})
	if rep.TornTail != 0 {
		t.Fatalf("a half record was left: %d bytes", rep.TornTail)
	}

	os.Remove(filler)
	s, _ := runPair(99)
	if err := l.Append(context.Background(), s); err != nil {
		t.Fatalf("append after space was freed: %v", err)
	}
	if err := l.Healthy(); err != nil {
		t.Fatalf("still unhealthy: %v", err)
	}
	l.Close()
	rep, err = Verify(dir, VerifyOptions{})
	if err != nil || rep.Outages != 1 {
		t.Fatalf("Verify: %+v %v", rep, err)
	}
}
