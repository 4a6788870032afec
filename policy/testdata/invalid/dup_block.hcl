# want: dup_block.hcl:5: daemon: declared twice (first at line 2)
daemon {
  socket = "/run/a.sock"
}
daemon {
  socket = "/run/b.sock"
}
