daemon {
  socket              = "/run/sb/sb.sock"
  socket_mode         = "0600"
  socket_group        = "skillbox"
  state_dir           = "/var/lib/sb"
  audit_dir           = "/var/log/sb"
  approvers           = ["alice", "1001"]
  max_connections     = 10
  max_concurrent_runs = 2
  max_active_skills   = 3
  run_queue_timeout   = "5s"
  idle_timeout        = "1h"
  max_line_bytes      = "1MiB"
  confirmation_ttl    = "2m"
  runtime             = "runc"
  tool_mode           = "preapprove"
}
skills {
  roots            = ["/srv/skills", "local"]
  allow_extensions = true
  catalog_budget   = 8000
  max_depth        = 2
  max_skills       = 100
  max_read_bytes   = 65536
}
runtime "runsc" {
  binary    = "/usr/local/bin/runsc"
  state_dir = "/run/sb/runsc"
  platform  = "ptrace"
  flags     = ["--debug"]
}
runtime "runc" {
  binary = "runc"
}
images {
  dir          = "/var/lib/sb/images"
  recipes_dirs = ["recipes"]
}
image "python" {
  extensions = [".py", ".pyw"]
}
image "ruby" {
  extensions  = [".rb"]
  interpreter = ["ruby", "--disable-gems"]
}
image "r" {
  extensions  = [".r"]
  interpreter = ["Rscript"]
  ref         = "registry.example.com/stats/r-base:4.4"
}
limits {
  timeout      = "1m"
  memory       = "1G"
  pids         = 256
  cpus         = 2
  workdir      = "128MiB"
  tmp          = "32MiB"
  stdout       = "2MiB"
  stderr       = 4096
  outputs      = "8MiB"
  output_files = 10
  output_file_bytes = "4MiB"
}
audit {
  rotate_size         = "100MB"
  rotate_age          = "24h"
  checkpoint_key      = "keys/audit.pem"
  checkpoint_interval = "10m"
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "Read"]
}
policy "net" {
  skills  = ["web-*"]
  network = true
  confirm = ["network"]
  script_dirs = ["scripts", "core"]
  limits {
    timeout = "10s"
    memory  = "256MiB"
  }
}
pool {
  per_key       = 3
  total         = 6
  idle_timeout  = "5m"
  memory_budget = "200MiB"
}
sessions {
  idle_timeout      = "30m"
  checkpoint_budget = "8GiB"
  checkpoint_budget_per_session = "1GiB"
  checkpoint_budget_per_uid     = "3GiB"
  checkpoint_disk_percent       = 40
  max_sandboxes     = 4
  background_runs   = 2
}
