# want: unknown_attr.hcl:3: daemon: Unsupported argument
daemon {
  sockt = "/run/x.sock"
}
