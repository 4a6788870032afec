#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each (default
# 15s; `hack/fuzz.sh 30s` for longer). A target that finds a crasher fails
# the run; Go has then written the input to the package's
# testdata/fuzz/<Target>/, where, once committed, it stays a regression case
# that `go test` replays every time.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
per_target="${1:-15s}"
status=0
targets=$(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(' . | sort)
for file in $targets; do
	pkg="./$(dirname "${file#./}")"
	for name in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed 's/^func //'); do
		echo "fuzz: $pkg $name ($per_target)"
		if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$per_target" "$pkg" >"/tmp/fuzz-$$.log" 2>&1; then
			cat "/tmp/fuzz-$$.log"
			echo "fuzz: $name in $pkg FAILED; the crasher is in $pkg/testdata/fuzz/$name/ (commit it as a regression case after fixing)"
			status=1
		fi
	done
done
rm -f "/tmp/fuzz-$$.log"
exit "$status"
