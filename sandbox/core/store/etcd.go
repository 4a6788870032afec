package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// EtcdOptions say which etcd holds the state and where in it.
type EtcdOptions struct {
	// Endpoints are the etcd members' client URLs.
	Endpoints []string
	// Prefix is the key prefix of this deployment's state (default
	// "/skillbox"): replicas that serve the same hosts share it.
	Prefix string
	// CAFile, CertFile and KeyFile configure TLS: CAFile alone verifies
	// the members, CertFile+KeyFile add a client certificate.
	CAFile, CertFile, KeyFile string
	// DialTimeout bounds the first contact (default 5s).
	DialTimeout time.Duration
}

// DefaultEtcdPrefix is EtcdOptions.Prefix's default.
const DefaultEtcdPrefix = "/skillbox"

// EtcdKV is a KV in etcd, shared by the replicas of a daemon: every key is
// <prefix>/<bucket>/<key>, and Update is a read and a transaction that
// writes only if the key's revision is still the one read, retried until
// it is (a compare-and-swap).
type EtcdKV struct {
	cli    *clientv3.Client
	prefix string
	desc   string // endpoints, for messages

	lockMu  sync.Mutex
	lockSes *concurrency.Session // the lease of this process's locks
}

var (
	_ KV     = (*EtcdKV)(nil)
	_ Locker = (*EtcdKV)(nil)
)

// OpenEtcd connects to etcd and checks that it answers and holds a state
// schema this skillbox knows (writing it into an empty prefix). An etcd
// that does not answer is an error naming the endpoints: the daemon does
// not start without its state.
func OpenEtcd(opts EtcdOptions) (*EtcdKV, error) {
	if len(opts.Endpoints) == 0 {
		return nil, fmt.Errorf("store \"etcd\" has no endpoints: set endpoints = [\"http://HOST:2379\"] in the config's store \"etcd\" block: %w", errkind.InvalidParams)
	}
	prefix := strings.TrimRight(opts.Prefix, "/")
	if opts.Prefix == "" {
		prefix = DefaultEtcdPrefix
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	desc := strings.Join(opts.Endpoints, ", ")
	cfg := clientv3.Config{Endpoints: opts.Endpoints, DialTimeout: opts.DialTimeout, Logger: zap.NewNop()}
	if opts.CAFile != "" || opts.CertFile != "" {
		tc, err := etcdTLS(opts)
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd at %s: %w", desc, err)
	}
	kv := &EtcdKV{cli: cli, prefix: prefix, desc: desc}
	ctx, cancel := context.WithTimeout(context.Background(), opts.DialTimeout)
	defer cancel()
	err = kv.Update(ctx, bucketMeta, keySchema, func(old []byte) ([]byte, error) {
		if old != nil && string(old) != fmt.Sprint(stateSchema) {
			return nil, fmt.Errorf("etcd at %s holds skillbox state schema %s under %s; this skillbox knows schema %d (downgrade?)", desc, old, prefix, stateSchema)
		}
		return []byte(fmt.Sprint(stateSchema)), nil
	})
	if err != nil {
		cli.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("etcd at %s did not answer within %s: start it, or fix the endpoints in the config's store \"etcd\" block (or set daemon.store = \"bbolt\" for one machine): %w", desc, opts.DialTimeout, errkind.Unavailable)
		}
		return nil, fmt.Errorf("opening the state in etcd at %s: %w", desc, err)
	}
	return kv, nil
}

func etcdTLS(o EtcdOptions) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", o.CAFile)
		}
	}
	if o.CertFile != "" || o.KeyFile != "" {
		c, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading cert_file and key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// String names the store for logs.
func (s *EtcdKV) String() string { return "etcd at " + s.desc + " under " + s.prefix }

func (s *EtcdKV) key(bucket, key string) string { return s.prefix + "/" + bucket + "/" + key }

// unavailable marks err (an etcd call's) as the store being unavailable.
func (s *EtcdKV) unavailable(err error) error {
	return fmt.Errorf("etcd at %s: %w: %w", s.desc, err, errkind.Unavailable)
}

// Get implements KV.
func (s *EtcdKV) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	r, err := s.cli.Get(ctx, s.key(bucket, key))
	if err != nil {
		return nil, s.unavailable(err)
	}
	if len(r.Kvs) == 0 {
		return nil, nil
	}
	return r.Kvs[0].Value, nil
}

// List implements KV.
func (s *EtcdKV) List(ctx context.Context, bucket string) ([]Entry, error) {
	p := s.key(bucket, "")
	r, err := s.cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, s.unavailable(err)
	}
	out := make([]Entry, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		out = append(out, Entry{Key: strings.TrimPrefix(string(kv.Key), p), Value: kv.Value})
	}
	return out, nil
}

// Update implements KV: a compare-and-swap on the key's revision, retried
// while another writer wins.
func (s *EtcdKV) Update(ctx context.Context, bucket, key string, fn UpdateFunc) error {
	k := s.key(bucket, key)
	for {
		r, err := s.cli.Get(ctx, k)
		if err != nil {
			return s.unavailable(err)
		}
		var old []byte
		rev := int64(0) // absent keys compare as revision 0
		if len(r.Kvs) > 0 {
			old, rev = r.Kvs[0].Value, r.Kvs[0].ModRevision
		}
		v, err := fn(old)
		if err != nil {
			return err
		}
		var op clientv3.Op
		switch {
		case old != nil && v != nil && string(old) == string(v), old == nil && v == nil:
			return nil
		case v == nil:
			op = clientv3.OpDelete(k)
		default:
			op = clientv3.OpPut(k, string(v))
		}
		t, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(op).Commit()
		if err != nil {
			return s.unavailable(err)
		}
		if t.Succeeded {
			return nil
		}
	}
}

// Lock implements Locker with an etcd mutex on a lease of this process:
// if the process dies, the lease expires and the lock is free again.
func (s *EtcdKV) Lock(ctx context.Context, name string) (func(), error) {
	ses, err := s.lockSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("taking the shared lock %q: %w", name, s.unavailable(err))
	}
	m := concurrency.NewMutex(ses, s.prefix+"/locks/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, fmt.Errorf("taking the shared lock %q: %w", name, s.unavailable(err))
	}
	return func() {
		ctx, cancel := opContext()
		defer cancel()
		m.Unlock(ctx) // a lock left behind ends with the lease
	}, nil
}

// lockTTL is how long (seconds) a lock outlives a daemon that stopped
// answering etcd.
const lockTTL = 15

// lockSession returns the lease locks are held on, a new one when the
// last expired (etcd unreachable for longer than its TTL).
func (s *EtcdKV) lockSession(ctx context.Context) (*concurrency.Session, error) {
	s.lockMu.Lock()
	defer s.lockMu.Unlock()
	if s.lockSes != nil {
		select {
		case <-s.lockSes.Done():
			s.lockSes = nil
		default:
			return s.lockSes, nil
		}
	}
	// The grant waits at most as long as the caller; the keep-alive lives
	// as long as the client.
	lease, err := s.cli.Grant(ctx, lockTTL)
	if err != nil {
		return nil, err
	}
	ses, err := concurrency.NewSession(s.cli, concurrency.WithLease(lease.ID))
	if err != nil {
		return nil, err
	}
	s.lockSes = ses
	return ses, nil
}

// Close implements KV.
func (s *EtcdKV) Close() error {
	s.lockMu.Lock()
	if s.lockSes != nil {
		s.lockSes.Close()
		s.lockSes = nil
	}
	s.lockMu.Unlock()
	return s.cli.Close()
}
