# want: image_no_interpreter.hcl:2: image "ruby".interpreter: is required
image "ruby" {
  extensions = [".rb"]
}
