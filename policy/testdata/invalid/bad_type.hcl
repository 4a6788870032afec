# want: bad_type.hcl:3: daemon.approvers: must be a list of strings
daemon {
  approvers = "root"
}
