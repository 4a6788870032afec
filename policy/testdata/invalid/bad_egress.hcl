# want: bad_egress.hcl:8: policy "p".egress: "api.example.com" has no port
# want: bad_egress.hcl:8: policy "p".egress: "*.com:443": a wildcard must name a domain with at least two labels
# want: bad_egress.hcl:12: policy "q".egress: "10.1.2.1/24:5432": 10.1.2.1/24 has host bits set; did you mean 10.1.2.0/24?
# want: bad_egress.hcl:16: policy "r".egress: must be a list of strings
# want: bad_egress.hcl:19: limits.egress_connections: must be at least 1
policy "p" {
  skills = ["*"]
  egress = ["api.example.com", "ok.example.com:443", "*.com:443"]
}
policy "q" {
  skills = ["*"]
  egress = ["10.1.2.1/24:5432"]
}
policy "r" {
  skills = ["*"]
  egress = "api.example.com:443"
}
limits {
  egress_connections = 0
}
