package store

import (
	"context"
	"time"
)

// KV is what the session, confirmation and proposal stores keep their
// records in: named buckets of keys, each key changed on its own by a
// read-modify-write that is a compare-and-swap. bbolt (StateDB) is the
// embedded one for a single daemon; etcd (EtcdKV) is shared by replicas.
// No store needs a transaction over several keys: what one did in a single
// bbolt transaction (a sweep, an expiry, a consume) is per-key updates that
// each re-check the record they change.
type KV interface {
	// Get returns the value of key in bucket, or nil when there is none.
	Get(ctx context.Context, bucket, key string) ([]byte, error)
	// List returns the bucket's entries in key order.
	List(ctx context.Context, bucket string) ([]Entry, error)
	// Update reads key, calls fn with its value (nil when absent) and
	// writes what fn returns, atomically: if the key changed meanwhile
	// (another replica), fn runs again on the new value, so fn must have
	// no effects beyond its result and what it records for the caller,
	// which the last run overwrites. A returned value equal to old writes
	// nothing, nil deletes the key, and an error from fn writes nothing
	// and is returned as is.
	Update(ctx context.Context, bucket, key string, fn UpdateFunc) error
	// Close releases the store.
	Close() error
}

// UpdateFunc computes a key's new value from its old one; see KV.Update.
type UpdateFunc func(old []byte) (new []byte, err error)

// Entry is one key and value of a bucket.
type Entry struct {
	Key   string
	Value []byte
}

// Bucket names.
const (
	bucketMeta          = "meta"
	bucketSessions      = "sessions"
	bucketConfirmations = "confirmations"
	bucketProposals     = "proposals"
	keySchema           = "schema"
)

// opTimeout bounds one store operation; the stores' methods take no
// context, and a shared store that stopped answering must not hang a call.
const opTimeout = 15 * time.Second

// opContext is the context of one store operation.
func opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// Locker serialises work that must not run twice at once across the
// daemons sharing a store (applying a proposal, writing the lock file).
type Locker interface {
	// Lock blocks until this process holds lock name or ctx ends; the
	// returned func releases it.
	Lock(ctx context.Context, name string) (unlock func(), err error)
}
