package policy

import "testing"

// Finding 4: the default request line cap is small enough that a few
// dozen requests cannot hold gigabytes.
func TestDefaultMaxLineBytesIsSmall(t *testing.T) {
	if n := Default().Daemon.MaxLineBytes; n > 4<<20 {
		t.Fatalf("default daemon.max_line_bytes is %d; want at most 4 MiB", n)
	}
}
