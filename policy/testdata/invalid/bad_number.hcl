# want: bad_number.hcl:4: daemon.max_connections: must be at least 1, not 0
# want: bad_number.hcl:7: limits.pids: must be a whole number, not 1.5
daemon {
  max_connections = 0
}
limits {
  pids = 1.5
  cpus = 0
}
