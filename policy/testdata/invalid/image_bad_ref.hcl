# want: image_bad_ref.hcl:5: image "ruby".ref: invalid registry reference "Registry.example.com/Team/ruby:3.3"
image "ruby" {
  extensions  = [".rb"]
  interpreter = ["ruby"]
  ref         = "Registry.example.com/Team/ruby:3.3"
}
