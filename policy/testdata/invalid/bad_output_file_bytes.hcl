# want: bad_output_file_bytes.hcl:3: limits.output_file_bytes: must be greater than 0 bytes
limits {
  output_file_bytes = 0
}
