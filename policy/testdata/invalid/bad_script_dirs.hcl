# want: bad_script_dirs.hcl:6: policy "p".script_dirs: "../up" leaves the skill
# want: bad_script_dirs.hcl:10: policy "q".script_dirs: "/abs" is absolute
# want: bad_script_dirs.hcl:14: policy "r".script_dirs: is empty, which would allow no script at all
policy "p" {
  skills      = ["*"]
  script_dirs = ["scripts", "../up"]
}
policy "q" {
  skills      = ["*"]
  script_dirs = ["/abs"]
}
policy "r" {
  skills      = ["*"]
  script_dirs = []
}
