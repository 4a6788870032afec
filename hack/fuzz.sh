#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each (default
# 8s; `hack/fuzz.sh 30s` for longer). A target that finds a crasher fails
# the run; Go has then written the input to the package's
# testdata/fuzz/<Target>/, where, once committed, it stays a regression case
# that `go test` replays every time.
#
# Go's fuzzing coordinator can fail a target with a bare "context deadline
# exceeded" when -fuzztime ends while its workers are starved of CPU
# (go.dev/issue/75804); that writes no input. Such a failure counts only if
# the target's corpus, replayed without fuzzing, fails too.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
per_target="${1:-8s}"
status=0
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# inputs DIR: how many inputs a target's corpus holds (0 without one).
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }
targets=$(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(' . | sort)
for file in $targets; do
	pkg="./$(dirname "${file#./}")"
	for name in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed 's/^func //'); do
		corpus="$pkg/testdata/fuzz/$name"
		before=$(inputs "$corpus")
		echo "fuzz: $pkg $name ($per_target)"
		if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$per_target" "$pkg" >"$log" 2>&1; then
			continue
		fi
		after=$(inputs "$corpus")
		if [ "$after" = "$before" ] && grep -q 'context deadline exceeded' "$log" &&
			go test -count=1 -run "^${name}\$" "$pkg" >/dev/null 2>&1; then
			echo "fuzz: $name stopped by Go's fuzzing deadline (go.dev/issue/75804), no failing input; its corpus passes"
			continue
		fi
		cat "$log"
		echo "fuzz: $name in $pkg FAILED; the failing input is in $corpus/ (fix the code, then commit the input as a regression case)"
		status=1
	done
done
exit "$status"
