# want: dirname:4 git:6 node:10 npm:11 npx:14 tar:17 jq:19
#!/bin/bash
set -e
cd "$(dirname "$0")/.."

VERSION=$(git describe --tags 2>/dev/null || echo dev)
export VERSION

command -v node >/dev/null || { echo "node is required" >&2; exit 1; }
node --version
npm ci --no-audit \
  --no-fund
for target in web cli; do
  npx esbuild "src/$target.ts" --bundle --outfile="dist/$target.js"
done

tar -czf "dist.tgz" dist/
# shellcheck disable=SC2046
jq -r '.name' package.json | while read -r name; do
  echo "$name"
done
