# want: unknown_nested_block.hcl:4: policy "x": Unsupported block type
policy "x" {
  skills = ["*"]
  limit {
    timeout = "1s"
  }
}
