# want: dup_policy.hcl:6: policy "x": declared twice (first at line 2)
policy "x" {
  skills = ["*"]
  tools  = ["Read"]
}
policy "x" {
  skills = ["a"]
}
