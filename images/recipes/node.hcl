# The node image runs .js and .mjs scripts with Debian 12's nodejs (18.x).
image "node" {
  suite   = "bookworm"
  mirror  = "http://deb.debian.org/debian"
  variant = "essential"
  sources = [
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
  ]
  packages = [
    "ca-certificates",
    "nodejs",
  ]
  interpreters = ["node", "nodejs"]
  notes        = "Debian 12's nodejs (18.x) without npm: skills get no package manager at run time."
}
