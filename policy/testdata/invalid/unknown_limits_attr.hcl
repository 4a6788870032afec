# want: unknown_limits_attr.hcl:5: policy "x".limits: Unsupported argument
policy "x" {
  skills = ["*"]
  limits {
    memroy = "1G"
  }
}
