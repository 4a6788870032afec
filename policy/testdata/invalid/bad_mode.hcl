# want: bad_mode.hcl:3: daemon.socket_mode: invalid mode "0999"
daemon {
  socket_mode = "0999"
}
