package stack

import (
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/core/store"
)

// TestOpenState: serve takes the daemon's store; other modes keep bbolt in
// their own dir whatever the config says; an etcd that does not answer
// stops serve with the endpoints and the config line named.
func TestOpenState(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	cfg, err := policy.Parse([]byte(`
daemon {
  store = "etcd"
}
store "etcd" {
  endpoints = ["`+dead+`"]
}
`), "etcd.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cfg     *policy.Config
		mode    Mode
		bbolt   bool
		wantErr []string
	}{
		{"default serve", policy.Default(), Serve, true, nil},
		{"mcp ignores daemon.store", cfg, MCP, true, nil},
		{"serve with a dead etcd", cfg, Serve, false, []string{dead, "etcd.hcl:5", "did not answer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, err := openState(tc.cfg, tc.mode == Serve, t.TempDir(), hclog.NewNullLogger())
			if tc.wantErr != nil {
				if err == nil {
					kv.Close()
					t.Fatal("opened")
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer kv.Close()
			if _, ok := kv.(*store.StateDB); ok != tc.bbolt {
				t.Errorf("store %T", kv)
			}
		})
	}
}
