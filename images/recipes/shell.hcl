# The shell image runs .sh scripts: bash plus the tools skill scripts reach
# for. It is the smallest image and the one the integration test builds.
image "shell" {
  suite = "trixie" # with trixie-updates and trixie-security
  packages = [
    "bash",
    "ca-certificates",
    "coreutils",
    "curl",
    "gawk",
    "git",
    "grep",
    "jq",
    "sed",
    "unzip",
    "zip",
  ]
  interpreters = ["bash", "sh"]
  notes        = "bash, coreutils, curl, git, jq, grep, sed, gawk, zip and unzip on Debian 13's essential set (no apt inside)."
}
