# want: syntax.hcl:3:
daemon {
  socket = "/run/x.sock
}
