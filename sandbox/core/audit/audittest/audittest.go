// Package audittest writes real signed audit logs for the tests of the
// commands that read them (verify, tail, query), so their fixtures are
// made now, with today's times, by the log's own Append, and gives the
// exports' tests a syslog socket to send to.
package audittest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// SignedLog appends records to a new log in a temporary directory, signed
// with a new key and without automatic checkpoints, and returns the log's
// directory, the public key's file and the checkpoints' file.
func SignedLog(t testing.TB, records []*audit.Record) (dir, pubKey, checkpoints string) {
	t.Helper()
	dir = t.TempDir()
	key := filepath.Join(t.TempDir(), "audit.key")
	if _, err := audit.GenerateKey(key); err != nil {
		t.Fatal(err)
	}
	priv, err := audit.LoadPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.Open(dir, audit.Options{SigningKey: priv, CheckpointEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if err := l.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, key + ".pub", filepath.Join(dir, "checkpoints.jsonl")
}

// SyslogSocket listens on a unix datagram socket, as a local syslog
// daemon does, in a new temporary directory under os.TempDir (a socket's
// path must be short), and returns its path and a function that returns
// the next datagram, failing the test if none comes within 10 seconds.
func SyslogSocket(t testing.TB) (path string, next func() []byte) {
	t.Helper()
	dir, err := os.MkdirTemp("", "syslog")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path = filepath.Join(dir, "log.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return path, func() []byte {
		t.Helper()
		buf := make([]byte, 1<<16)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("reading the syslog socket: %v", err)
		}
		return buf[:n]
	}
}
