# want: missing_skills.hcl:2: policy "x".skills: is required
policy "x" {
  tools = ["Read"]
}
