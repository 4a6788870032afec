daemon {
  socket = "/run/skillbox/skillbox.sock"
}
skills {
  roots = ["skills"]
}
