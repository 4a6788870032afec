# want: bad_duration_number.hcl:3: daemon.idle_timeout: must be a duration string
daemon {
  idle_timeout = 30
}
