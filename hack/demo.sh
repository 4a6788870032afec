#!/usr/bin/env bash
# The newcomer's tour: validate and list the sample skills, render the prompt
# block a host gives its model, run a sample script in gVisor with an audit
# log, and show and verify the audit records it left.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./bin/skillbox
demo=$(mktemp -d /tmp/skillbox-demo.XXXXXX)
cat >"$demo/skillbox.hcl" <<HCL
daemon {
  socket    = "$demo/skillbox.sock"
  state_dir = "$demo/state"
  audit_dir = "$demo/audit"
  approvers = ["root"]
}
skills {
  roots = ["$PWD/examples/skills"]
}
images {
  dir = "${SKILLBOX_IMAGES:-/var/lib/skillbox/images}"
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script"]
}
HCL

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "validate the sample skills"
$bin skills validate --allow-extensions examples/skills/*/

step "index them"
$bin skills list --root examples/skills

step "the catalog a host puts in its model's prompt"
$bin skills prompt examples/skills/*/

step "run hello-python/scripts/hello.py in gVisor (runsc)"
$bin run --config "$demo/skillbox.hcl" --runtime runsc hello-python scripts/hello.py -- from the demo

step "the same run, as the structured result a host gets"
$bin run --config "$demo/skillbox.hcl" --json hello-python scripts/hello.py -- again

step "the audit records those runs left ($demo/audit)"
$bin audit query --dir "$demo/audit"
step "the last run's end record, as stored (hash-chained JSON line)"
$bin audit tail --dir "$demo/audit" -n 1 --json

step "verify the audit hash chain"
$bin audit verify --dir "$demo/audit"

# Without root: an ordinary user's run (nobody here) on gVisor rootless, in
# a user namespace of its own, with the limits it had and what held them.
step "the same script as an ordinary user (uid 65534, no root): gVisor rootless"
if [ "$(id -u)" = 0 ]; then
  user="$demo/user"
  mkdir -p "$user"
  cp "$bin" "$user/skillbox"
  cp -r examples/skills "$user/skills"
  chmod 755 "$demo"
  chown -R 65534:65534 "$user"
  as_nobody() {
    setpriv --reuid=65534 --regid=65534 --clear-groups \
      env -i HOME="$user" PATH="$PATH" SKILLBOX_IMAGES="${SKILLBOX_IMAGES:-/var/lib/skillbox/images}" \
      "$user/skillbox" "$@"
  }
  as_nobody run --root "$user/skills" hello-python scripts/hello.py -- as nobody
  echo "what held each limit (from --json):"
  as_nobody run --root "$user/skills" --json hello-python scripts/hello.py | sed -n '/"limits_enforced_by"/,/}/p'
else
  echo "(this demo already ran as uid $(id -u): every run above was rootless)"
fi
