# Several problems at once are all reported.
# want: many.hcl:6: daemon.max_active_skills
# want: many.hcl:9: limits.memory
# want: many.hcl:13: policy "p".deny
daemon {
  max_active_skills = -1
}
limits {
  memory = "lots"
}
policy "p" {
  skills = ["*"]
  deny   = ["()"]
}
