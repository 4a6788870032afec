# want: bad_glob.hcl:3: policy "x".skills: invalid glob "[a-"
policy "x" {
  skills = ["[a-"]
  tools  = ["Read"]
}
