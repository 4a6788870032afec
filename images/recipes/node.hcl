# The node image runs .js, .mjs and .cjs scripts with Debian 13's nodejs and
# npm (for build scripts that call it; the sandbox has no network unless
# policy gives the skill egress).
image "node" {
  suite = "trixie" # with trixie-updates and trixie-security
  packages = [
    "ca-certificates",
    "nodejs",
    "npm",
  ]
  interpreters = ["node", "nodejs"]
  notes        = "Debian 13's nodejs (20.x) and npm; npm keeps its cache under $HOME."
}
