# Rules for the decision tests. Blocks are separated by one blank line so the
# order-independence test can shuffle them.
limits {
  timeout = "1m"
  memory  = "1GiB"
}

policy "base" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "Read", "Bash(git:*)", "mcp__github"]
  deny   = ["Bash(git push:*)"]
}

policy "guarded" {
  skills  = ["guarded-*"]
  confirm = ["skills.run_script", "Bash(git commit:*)"]
  limits {
    memory = "256MiB"
  }
}

policy "lockdown" {
  skills = ["guarded-secret", "evil"]
  deny   = ["skills.run_script"]
  tools  = ["Write"]
  limits {
    timeout = "10s"
    memory  = "512MiB"
    pids    = 16
  }
}

policy "generous" {
  skills = ["evil"]
  limits {
    timeout = "1h"
    memory  = "64GiB"
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
