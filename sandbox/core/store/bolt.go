package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// StateFile is the database's name inside the state directory.
const StateFile = "state.db"

const stateSchema = 1

// StateDB is the daemon's persistent state (<state_dir>/state.db), the
// embedded KV of one daemon. Only one process may hold it open; a second
// daemon on the same state directory fails to open it.
type StateDB struct {
	db   *bolt.DB
	path string
	localLocker
}

var (
	_ KV     = (*StateDB)(nil)
	_ Locker = (*StateDB)(nil)
)

// OpenStateDB opens (creating if needed) <stateDir>/state.db. The directory
// is created 0700 and the file 0600: sessions name what a user is doing.
func OpenStateDB(stateDir string) (*StateDB, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	path := filepath.Join(stateDir, StateFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("state database %s is in use by another process (is another skillbox serving with this state_dir?): %w", path, errkind.Unavailable)
	}
	if err != nil {
		return nil, fmt.Errorf("opening state database %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists([]byte(bucketMeta))
		if err != nil {
			return err
		}
		if v := meta.Get([]byte(keySchema)); v != nil {
			if string(v) != fmt.Sprint(stateSchema) {
				return fmt.Errorf("state database %s has schema %s; this skillbox knows schema %d (downgrade?)", path, v, stateSchema)
			}
		} else if err := meta.Put([]byte(keySchema), []byte(fmt.Sprint(stateSchema))); err != nil {
			return err
		}
		for _, b := range []string{bucketSessions, bucketConfirmations} {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialising state database: %w", err)
	}
	return &StateDB{db: db, path: path}, nil
}

// Path is the database file.
func (s *StateDB) Path() string { return s.path }

// Close closes the database; stop the stores' sweepers and the server first.
func (s *StateDB) Close() error { return s.db.Close() }

// Get implements KV.
func (s *StateDB) Get(_ context.Context, bucket, key string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte(bucket)); b != nil {
			if v := b.Get([]byte(key)); v != nil {
				out = bytes.Clone(v)
			}
		}
		return nil
	})
	return out, err
}

// List implements KV.
func (s *StateDB) List(_ context.Context, bucket string) ([]Entry, error) {
	var out []Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out = append(out, Entry{Key: string(k), Value: bytes.Clone(v)})
			return nil
		})
	})
	return out, err
}

// Update implements KV: bbolt's write transactions are serialised, so fn
// runs once.
func (s *StateDB) Update(_ context.Context, bucket, key string, fn UpdateFunc) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		old := b.Get([]byte(key))
		if old != nil {
			old = bytes.Clone(old)
		}
		v, err := fn(old)
		switch {
		case err != nil:
			return err
		case bytes.Equal(v, old) && (v == nil) == (old == nil):
			return nil
		case v == nil:
			return b.Delete([]byte(key))
		}
		return b.Put([]byte(key), v)
	})
}

// localLocker is the Locker of a store only one process uses: a mutex per
// name.
type localLocker struct {
	mu    sync.Mutex
	locks map[string]chan struct{}
}

// Lock implements Locker.
func (l *localLocker) Lock(ctx context.Context, name string) (func(), error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]chan struct{}{}
	}
	ch, ok := l.locks[name]
	if !ok {
		ch = make(chan struct{}, 1)
		l.locks[name] = ch
	}
	l.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for lock %q: %w", name, ctx.Err())
	}
}
