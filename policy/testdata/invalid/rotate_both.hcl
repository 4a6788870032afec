# want: rotate_both.hcl:4: audit.rotate_size: is another name for rotate_bytes
audit {
  rotate_bytes = "1MiB"
  rotate_size  = "1MiB"
}
