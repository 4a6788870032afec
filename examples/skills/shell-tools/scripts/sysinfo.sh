#!/usr/bin/env bash
# Report what the sandbox looks like from the inside.
set -uo pipefail

echo "kernel:  $(uname -sr)"
echo "user:    $(id -u):$(id -g)"
echo "cwd:     $(pwd)"
echo "pids:    $(cat /sys/fs/cgroup/pids.max 2>/dev/null || echo unknown)"
echo "memory:  $(cat /sys/fs/cgroup/memory.max 2>/dev/null || echo unknown)"
if (exec 3<>/dev/tcp/1.1.1.1/53) 2>/dev/null; then
  echo "network: reachable"
else
  echo "network: off"
fi
if touch /skill-write-test 2>/dev/null; then
  echo "rootfs:  writable"
  rm -f /skill-write-test
else
  echo "rootfs:  read-only"
fi
