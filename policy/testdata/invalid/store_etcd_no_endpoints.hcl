# want: daemon.store: is "etcd" but no store "etcd" block names its endpoints
daemon {
  store = "etcd"
}
