# want: bad_extension.hcl:3: image "python".extensions: invalid extension "py"
image "python" {
  extensions = ["py"]
}
