# want: bad_mode_number.hcl:3: daemon.socket_mode: must be a quoted octal string
daemon {
  socket_mode = 660
}
