policy "base" {
  skills = ["*"]
  tools  = ["skills.run_script"]
}

policy "api" {
  skills = ["api-*"]
  egress = ["api.example.com:443", "*.example.org:443"]
}

policy "db" {
  skills  = ["api-db"]
  egress  = ["10.1.2.0/24:5432", "api.example.com:443"]
  confirm = ["network"]
  limits {
    egress_connections = 10
    egress_bytes_out   = "1MiB"
  }
}

policy "cut-off" {
  skills  = ["api-offline"]
  network = false
}

secret "API_TOKEN" {
  from_env = "SKILLBOX_TEST_API_TOKEN"
  hosts    = ["api.example.com"]
  header   = "Authorization: Bearer %s"
}

secret "DB_PASSWORD" {
  from_file = "db-password.txt"
  hosts     = ["db.internal.example.net"]
  skills    = ["api-db"]
}
