# want: store_unknown.hcl:3: daemon.store: unknown value "redis": choose one of bbolt, etcd
daemon {
  store = "redis"
}
