# The shell image runs .sh scripts: bash plus the text tools skill scripts
# reach for. It is the smallest image and the one the integration test builds.
image "shell" {
  suite   = "bookworm"
  mirror  = "http://deb.debian.org/debian"
  variant = "essential"
  sources = [
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
  ]
  packages = [
    "bash",
    "ca-certificates",
    "coreutils",
    "gawk",
    "grep",
    "jq",
    "sed",
  ]
  interpreters = ["bash", "sh"]
  notes        = "bash, coreutils, jq, grep, sed and gawk on Debian 12's essential set (no apt inside)."
}
