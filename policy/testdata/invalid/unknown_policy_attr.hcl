# want: unknown_policy_attr.hcl:4: policy "x": Unsupported argument
policy "x" {
  skills = ["*"]
  allow  = ["Read"]
}
