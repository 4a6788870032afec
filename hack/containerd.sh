#!/usr/bin/env bash
# A private containerd for tests and demos: Debian's containerd package with
# its own root, state, socket and config under DIR, so that it neither needs
# nor touches a containerd the host may run. The pinned gVisor shim
# (containerd-shim-runsc-v1, installed by hack/install-runsc.sh) is on its
# PATH, so the runtime handler io.containerd.runsc.v1 works with it.
#
#   hack/containerd.sh start DIR    start it (idempotent); prints the socket
#   hack/containerd.sh stop DIR     remove its containers and tasks, stop it,
#                                   its shims and mounts, and remove DIR
#   hack/containerd.sh address DIR  print the socket path
#
# Needs root (containerd mounts and runs shims).
set -euo pipefail

usage() {
  echo "usage: $0 start|stop|address DIR" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
cmd=$1
dir=$(realpath -m "$2")
sock=$dir/containerd.sock
pidfile=$dir/containerd.pid
here=$(cd "$(dirname "$0")" && pwd)

running() {
  [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

ctr_() { ctr --address "$sock" "$@"; }

case $cmd in
address)
  echo "$sock"
  ;;
start)
  if ! command -v containerd >/dev/null; then
    echo "containerd.sh: containerd is not installed: apt-get install containerd" >&2
    exit 1
  fi
  if running; then
    echo "$sock"
    exit 0
  fi
  # Unix socket paths are limited to 108 bytes.
  if (( ${#sock} > 100 )); then
    echo "containerd.sh: $sock is too long for a socket path; use a shorter DIR" >&2
    exit 1
  fi
  install -d -m 0711 "$dir" "$dir/root" "$dir/state"
  cat >"$dir/config.toml" <<EOF
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
EOF
  shimdir=$(dirname "$("$here/install-runsc.sh" --path)")
  PATH="$shimdir:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    setsid containerd --config "$dir/config.toml" --log-level "${CONTAINERD_LOG_LEVEL:-info}" \
    >"$dir/containerd.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    if [[ -S $sock ]] && ctr_ version >/dev/null 2>&1; then
      echo "$sock"
      exit 0
    fi
    if ! running; then
      break
    fi
    sleep 0.1
  done
  echo "containerd.sh: containerd did not start; its log:" >&2
  tail -20 "$dir/containerd.log" >&2
  exit 1
  ;;
stop)
  if running; then
    # Containers and tasks of every namespace first, so the shims exit.
    for ns in $(ctr_ namespaces ls -q 2>/dev/null); do
      for c in $(ctr_ -n "$ns" containers ls -q 2>/dev/null); do
        ctr_ -n "$ns" tasks kill -a -s SIGKILL "$c" >/dev/null 2>&1 || true
        ctr_ -n "$ns" tasks delete -f "$c" >/dev/null 2>&1 || true
        ctr_ -n "$ns" containers delete "$c" >/dev/null 2>&1 || true
      done
    done
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # Shims outlive containerd by design; these ones were started for this
  # instance (their -address is its socket).
  for p in /proc/[0-9]*; do
    if tr "\\0" " " 2>/dev/null <"$p/cmdline" | grep -q -- "-address $sock "; then
      kill -KILL "${p#/proc/}" 2>/dev/null || true
    fi
  done
  # Mounts under DIR (snapshots, task rootfs), deepest first.
  if [[ -d $dir ]]; then
    awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$dir"
  fi
  ;;
*)
  usage
  ;;
esac
