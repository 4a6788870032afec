daemon {
  socket    = "/run/skillbox/skillbox.sock"
  state_dir = "/var/lib/skillbox"
  audit_dir = "/var/log/skillbox"
  approvers = ["root"]          # users (names or uids) allowed to approve confirmations
}
skills {
  roots = ["/etc/skillbox/skills"]
}
policy "default" {
  skills = ["*"]                         # glob on skill names
  tools  = ["skills.read", "skills.run_script"]
}
policy "needs-approval" {
  skills  = ["guarded-*"]
  confirm = ["skills.run_script"]
}
