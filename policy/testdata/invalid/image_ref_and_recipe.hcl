# want: image_ref_and_recipe.hcl:6: image "ruby".ref: an image is built from a recipe or pulled from a registry, not both
image "ruby" {
  extensions  = [".rb"]
  interpreter = ["ruby"]
  recipe      = "ruby"
  ref         = "registry.example.com/team/ruby:3.3"
}
