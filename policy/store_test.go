package policy

import (
	"reflect"
	"testing"
)

func TestStoreSettings(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		store     string
		etcd      EtcdStore
	}{
		{"default", ``, StoreBbolt, EtcdStore{Prefix: "/skillbox"}},
		{"etcd", `
daemon {
  store = "etcd"
}
store "etcd" {
  endpoints = ["http://10.0.0.5:2379", "http://10.0.0.6:2379"]
  prefix    = "/skillbox/prod"
  ca_file   = "/etc/skillbox/etcd-ca.pem"
}
`, StoreEtcd, EtcdStore{Endpoints: []string{"http://10.0.0.5:2379", "http://10.0.0.6:2379"}, Prefix: "/skillbox/prod", CAFile: "/etc/skillbox/etcd-ca.pem", Pos: Pos{File: "t.hcl", Line: 5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.src), "t.hcl")
			if err != nil {
				t.Fatal(err)
			}
			if c.Daemon.Store != tc.store || !reflect.DeepEqual(c.Etcd, tc.etcd) {
				t.Fatalf("store %q, etcd %+v; want %q, %+v", c.Daemon.Store, c.Etcd, tc.store, tc.etcd)
			}
		})
	}
}
