#!/usr/bin/env bash
# Installs the official MCP TypeScript SDK, pinned by the package-lock.json in
# cmd/skillbox/testdata/mcpclient, into a cache directory for the end-to-end
# MCP test (a real third-party client driving `skillbox mcp`). Idempotent and
# quiet: it does nothing when the cache already holds exactly that lock.
#
# Usage: hack/mcp-client-deps.sh [CACHE_DIR]
# CACHE_DIR defaults to $SKILLBOX_MCP_CLIENT_DIR, then
# ${XDG_CACHE_HOME:-$HOME/.cache}/skillbox/mcp-client. Prints the directory
# (the one to pass to the test as SKILLBOX_MCP_CLIENT_DIR) on stdout. The
# scripted client (client.mjs) is copied there too, so it resolves the SDK.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src="$here/cmd/skillbox/testdata/mcpclient"
dir=${1:-${SKILLBOX_MCP_CLIENT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/skillbox/mcp-client}}

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "mcp-client-deps: $tool is required (Node.js 20 or later; Debian: apt-get install nodejs npm)" >&2
    exit 1
  fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if ((major < 20)); then
  echo "mcp-client-deps: Node.js $(node --version) is too old; the MCP SDK needs 20 or later" >&2
  exit 1
fi

want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
stamp="$dir/.skillbox-lock-sha256"
if [[ -f $stamp && $(cat "$stamp") == "$want" && -d $dir/node_modules/@modelcontextprotocol/sdk ]]; then
  cp "$src/client.mjs" "$dir/"
  echo "$dir"
  exit 0
fi

mkdir -p "$dir"
cp "$src/package.json" "$src/package-lock.json" "$dir/"
rm -f "$stamp"
# npm ci installs exactly the lock (integrity-checked) and runs no package scripts.
if ! out=$(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error 2>&1); then
  echo "$out" >&2
  echo "mcp-client-deps: npm ci failed in $dir; check that the npm registry is reachable" >&2
  exit 1
fi
cp "$src/client.mjs" "$dir/"
echo "$want" >"$stamp"
echo "mcp-client-deps: installed @modelcontextprotocol/sdk $(node -p "require('$dir/node_modules/@modelcontextprotocol/sdk/package.json').version") in $dir" >&2
echo "$dir"
