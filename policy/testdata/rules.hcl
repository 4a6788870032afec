# Rules for the decision tests. Blocks are separated by one blank line so the
# order-independence test can shuffle them.
limits {
  timeout = "1m"
  memory  = "1GiB"
}

policy "base" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "skills.run_code(python)", "Read", "Bash(git:*)", "mcp__github"]
  deny   = ["Bash(git push:*)"]
}

policy "guarded" {
  skills  = ["guarded-*"]
  confirm = ["skills.run_script", "skills.run_code", "Bash(git commit:*)"]
  script_dirs = ["scripts", "core"]
  limits {
    memory = "256MiB"
  }
}

policy "lockdown" {
  skills = ["guarded-secret", "evil"]
  deny   = ["skills.run_script", "skills.run_code(shell)"]
  tools  = ["Write"]
  script_dirs = ["scripts/tools", "core/gif", "eval"]
  limits {
    timeout = "10s"
    memory  = "512MiB"
    pids    = 16
    output_file_bytes = "1MiB"
  }
}

policy "generous" {
  skills = ["evil"]
  script_dirs = ["other"]
  limits {
    timeout = "1h"
    memory  = "64GiB"
    output_file_bytes = "1GiB"
  }
}

policy "web" {
  skills  = ["web-*", "guarded-web"]
  tools   = ["WebFetch(domain:*.example.com)", "WebFetch(domain:example.com)"]
  network = true
  confirm = ["network"]
}

policy "web-offline" {
  skills  = ["web-offline"]
  network = false
}

policy "js" {
  skills = ["js-*"]
  tools  = ["Bash(npm run test:*)", "Bash(npm ci)", "mcp__*__search"]
}
