# want: bad_secret.hcl:9: secret "1BAD": invalid secret name
# want: bad_secret.hcl:13: secret "A".from_file: set only one of from_env and from_file
# want: bad_secret.hcl:14: secret "A".hosts: "*.example.com" is not a host name
# want: bad_secret.hcl:15: secret "A".header: header "Bearer %s" must be "Name: value with %s"
# want: bad_secret.hcl:17: secret "B": needs from_env
# want: bad_secret.hcl:17: secret "B".hosts: is required
# want: bad_secret.hcl:19: secret "A": declared twice
# want: bad_secret.hcl:9: secret "1BAD"
secret "1BAD" {
}
secret "A" {
  from_env  = "X"
  from_file = "y"
  hosts     = ["*.example.com"]
  header    = "Bearer %s"
}
secret "B" {
}
secret "A" {
  from_env = "X"
  hosts    = ["a.example.com"]
}
