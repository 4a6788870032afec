package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/store/storetest"
)

// etcdURL is the etcd that TestMain started for the package's tests, or
// "" (with etcdMissing saying why) when there is none.
var etcdURL, etcdMissing string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		bin, err := storetest.EtcdBinary(fetchEtcd)
		switch {
		case err != nil:
			fmt.Fprintln(os.Stderr, err)
			return 1
		case bin == "":
			etcdMissing = "no etcd binary (set SKILLBOX_ETCD, or run hack/kube.sh etcd-bin, or the integration tests, which fetch it)"
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "store-etcd-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		url, stop, err := storetest.Start(bin, dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
		etcdURL = url
		return m.Run()
	}())
}

// backend is a KV implementation the stores' tests run on.
type backend struct {
	name string
	// open opens the KV whose state is named by dir: opening the same dir
	// again (after Close) gives the same state.
	open func(t *testing.T, dir string) KV
}

var etcdPrefixes atomic.Int64

var backends = []backend{
	{"bbolt", func(t *testing.T, dir string) KV { return openState(t, dir) }},
	{"etcd", func(t *testing.T, dir string) KV {
		t.Helper()
		if etcdURL == "" {
			t.Skip(etcdMissing)
		}
		// A prefix per state dir keeps the tests apart in one etcd.
		p := filepath.Join(dir, ".etcd-prefix")
		prefix, err := os.ReadFile(p)
		if err != nil {
			prefix = fmt.Appendf(nil, "/test/%d", etcdPrefixes.Add(1))
			if err := os.WriteFile(p, prefix, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		kv, err := OpenEtcd(EtcdOptions{Endpoints: []string{etcdURL}, Prefix: string(prefix)})
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}},
}

// forBackends runs f once per backend, as subtests.
func forBackends(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

func TestKVUpdate(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		kv := b.open(t, t.TempDir())
		defer kv.Close()
		ctx := context.Background()
		set := func(v string) UpdateFunc { return func([]byte) ([]byte, error) { return []byte(v), nil } }
		for _, k := range []string{"b", "a", "c"} {
			if err := kv.Update(ctx, "x", k, set("v"+k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := kv.Update(ctx, "y", "a", set("other bucket")); err != nil {
			t.Fatal(err)
		}
		l, err := kv.List(ctx, "x")
		if err != nil || len(l) != 3 || l[0].Key != "a" || string(l[0].Value) != "va" || l[2].Key != "c" {
			t.Fatalf("List = %v, %v", l, err)
		}
		if err := kv.Update(ctx, "x", "b", func(old []byte) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		if v, err := kv.Get(ctx, "x", "b"); v != nil || err != nil {
			t.Fatalf("deleted key: %q, %v", v, err)
		}
		wantErr := fmt.Errorf("refused")
		if err := kv.Update(ctx, "x", "a", func([]byte) ([]byte, error) { return []byte("no"), wantErr }); err != wantErr {
			t.Fatalf("fn's error: %v", err)
		}
		if v, _ := kv.Get(ctx, "x", "a"); string(v) != "va" {
			t.Fatalf("failed update wrote %q", v)
		}
		if l, err := kv.List(ctx, "none"); len(l) != 0 || err != nil {
			t.Fatalf("empty bucket: %v, %v", l, err)
		}
	})
}

func TestKVLockerSerialises(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		dir := t.TempDir()
		a := b.open(t, dir)
		defer a.Close()
		c := a // one process holds a bbolt state
		if b.name == "etcd" {
			c = b.open(t, dir) // a second client: another replica
			defer c.Close()
		}
		ctx := context.Background()
		unlock, err := a.(Locker).Lock(ctx, "skills")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan struct{})
		go func() {
			u, err := c.(Locker).Lock(ctx, "skills")
			if err != nil {
				t.Error(err)
				close(got)
				return
			}
			close(got)
			u()
		}()
		select {
		case <-got:
			t.Fatal("second holder got the lock while the first held it")
		case <-time.After(300 * time.Millisecond):
		}
		unlock()
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("lock not handed over after unlock")
		}
	})
}

func TestOpenEtcdErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close() // nothing answers there now
	for _, tc := range []struct {
		name string
		opts EtcdOptions
		want []string
		kind error
	}{
		{"no endpoints", EtcdOptions{}, []string{"no endpoints", "endpoints = ["}, api.ErrInvalidParams},
		{"unreachable", EtcdOptions{Endpoints: []string{dead}, DialTimeout: time.Second}, []string{dead, "did not answer", "store \"etcd\""}, api.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, err := OpenEtcd(tc.opts)
			if err == nil {
				kv.Close()
				t.Fatal("opened")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %q is not %v", err, tc.kind)
			}
		})
	}
}
