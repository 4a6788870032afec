# want: network_in_tools.hcl:4: policy "x".tools: "network" is not a tool here
policy "x" {
  skills = ["*"]
  tools  = ["network"]
}
