# want: bad_duration.hcl:3: limits.timeout: invalid duration "30 seconds"
limits {
  timeout = "30 seconds"
}
