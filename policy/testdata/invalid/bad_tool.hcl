# want: bad_tool.hcl:4: policy "x".tools: invalid tool pattern "Bash(git:*": missing ")"
policy "x" {
  skills = ["*"]
  tools  = ["Read", "Bash(git:*"]
}
