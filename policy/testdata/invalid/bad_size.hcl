# want: bad_size.hcl:3: limits.memory: invalid size "512QB"
limits {
  memory = "512QB"
}
