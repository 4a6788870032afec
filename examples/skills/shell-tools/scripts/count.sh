#!/usr/bin/env bash
# Count lines, words and bytes of each named file, or of stdin.
set -euo pipefail

if [ "$#" -eq 0 ]; then
  read -r lines words bytes < <(wc -l -w -c)
  printf '%-20s %8s %8s %8s\n' "FILE" "LINES" "WORDS" "BYTES"
  printf '%-20s %8d %8d %8d\n' "(stdin)" "$lines" "$words" "$bytes"
  exit 0
fi

printf '%-20s %8s %8s %8s\n' "FILE" "LINES" "WORDS" "BYTES"
status=0
for f in "$@"; do
  if [ ! -f "$f" ]; then
    echo "count.sh: $f: not a file (pass it with the run's files)" >&2
    status=1
    continue
  fi
  read -r lines words bytes _ < <(wc -l -w -c -- "$f")
  printf '%-20s %8d %8d %8d\n' "$f" "$lines" "$words" "$bytes"
done
exit "$status"
