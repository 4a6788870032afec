#!/usr/bin/env bash
# Cold-run cost of each python image: N runs of examples/skills/hello-python's
# hello.py with `skillbox run` (a fresh sandbox each), in the batteries-included
# python image and in python-slim, under runsc and runc; prints the median
# wall-clock time of the whole command per pair. As root, after
# `skillbox images build python python-slim`. Usage:
#   hack/bench-images.sh [RUNS] [RUNSC_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
runsc=${2:-runsc}
bin=./bin/skillbox
tmp=$(mktemp -d /tmp/skillbox-bench-images.XXXXXX)
# A current runsc leaves a mount (its null network namespace) in its state dir.
cleanup() {
  findmnt -rno TARGET | grep "^$tmp/" | sort -r | while read -r m; do umount "$m"; done
  rm -rf "$tmp"
}
trap cleanup EXIT
platform=""
[[ $runsc != runsc ]] && platform='platform = "systrap"'
for img in python python-slim; do
  cat >"$tmp/$img.hcl" <<HCL
runtime "runsc" {
  binary    = "$runsc"
  state_dir = "$tmp/runsc"
  $platform
}
runtime "runc" {
  state_dir = "$tmp/runc"
}
image "python" {
  recipe = "$img"
}
HCL
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for rt in runsc runc; do
  for img in python python-slim; do
    "$bin" run --no-build --config "$tmp/$img.hcl" --runtime "$rt" --root examples/skills hello-python scripts/hello.py >/dev/null # warm the page cache
    m=$(for _ in $(seq "$runs"); do
      s=$(date +%s%N)
      "$bin" run --no-build --config "$tmp/$img.hcl" --runtime "$rt" --root examples/skills hello-python scripts/hello.py >/dev/null
      echo $(( ($(date +%s%N) - s) / 1000000 ))
    done | median)
    printf '%-6s %-12s %6s ms  (median of %d cold runs)\n' "$rt" "$img" "$m" "$runs"
  done
done
