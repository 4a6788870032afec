# want: unknown_block.hcl:4: Unsupported block type
# want: deamon
skills {}
deamon {
  socket = "/run/x.sock"
}
