# want: dup_extension.hcl:2: image "py2".extensions: extension ".py" is also mapped by image "python" (built-in)
image "py2" {
  extensions  = [".py"]
  interpreter = ["python2"]
}
