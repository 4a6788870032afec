# The node image runs .js, .mjs and .cjs scripts with Debian 13's nodejs and
# npm (for build scripts that call it; the sandbox has no network unless
# policy gives the skill egress).
image "node" {
  suite   = "trixie"
  mirror  = "http://deb.debian.org/debian"
  variant = "essential"
  sources = [
    "deb http://deb.debian.org/debian trixie-updates main",
    "deb http://deb.debian.org/debian-security trixie-security main",
  ]
  packages = [
    "ca-certificates",
    "nodejs",
    "npm",
  ]
  interpreters = ["node", "nodejs"]
  notes        = "Debian 13's nodejs (20.x) and npm; npm keeps its cache under $HOME."
}
