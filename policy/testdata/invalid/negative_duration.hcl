# want: negative_duration.hcl:3: daemon.confirmation_ttl: must be greater than 0
daemon {
  confirmation_ttl = "-5m"
}
