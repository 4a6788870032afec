# want: unknown store "bbolt"
# want: store "etcd".prefix: must start with /
# want: cert_file and key_file go together
store "bbolt" {}
store "etcd" {
  endpoints = ["http://127.0.0.1:2379"]
  prefix = "skillbox"
  cert_file = "/etc/skillbox/etcd.crt"
}
