# want: bad_size_zero.hcl:3: limits.stdout: must be greater than 0 bytes
limits {
  stdout = 0
}
