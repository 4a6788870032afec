# want: variable.hcl:3: daemon.socket: Variables not allowed
daemon {
  socket = var.socket
}
