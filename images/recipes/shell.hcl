# The shell image runs .sh scripts: bash plus the tools skill scripts reach
# for, node and npm included (build scripts of web skills are bash scripts
# that call them). The integration test builds it.
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
    "nodejs", # build scripts of web skills call node and npm from bash
    "npm",
    "sed",
    "unzip",
    "zip",
  ]
  interpreters = ["bash", "sh"]
  notes        = "bash, coreutils, curl, git, jq, grep, sed, gawk, zip, unzip, node and npm on Debian 13's essential set (no apt inside)."
}
