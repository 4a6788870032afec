// Package audittest writes real signed audit logs for the tests of the
// commands that read them (verify, tail, query), so their fixtures are
// made now, with today's times, by the log's own Append.
package audittest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/skillbox/skillbox/sandbox/audit"
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
