#!/usr/bin/env bash
# Simulated deployment: validates its arguments, prints the plan, and
# pretends to roll out. It changes nothing, anywhere.
set -euo pipefail

usage() {
  echo "usage: deploy.sh [--dry-run] SERVICE staging|production [VERSION]" >&2
  exit 2
}

dry_run=0
if [ "${1:-}" = "--dry-run" ]; then
  dry_run=1
  shift
fi
[ "$#" -ge 2 ] || usage
service=$1 env=$2 version=${3:-latest}

case "$service" in
  *[!a-z0-9-]* | "") echo "deploy.sh: invalid service name: $service" >&2; exit 2 ;;
esac
case "$env" in
  staging | production) ;;
  *) echo "deploy.sh: unknown environment: $env (staging or production)" >&2; exit 2 ;;
esac

echo "plan: deploy $service@$version to $env"
echo "  1. check health of $env"
echo "  2. roll out $service@$version in 3 waves"
echo "  3. verify and record the release"
if [ "$dry_run" -eq 1 ]; then
  echo "dry run: nothing changed"
  exit 0
fi
for wave in 1 2 3; do
  echo "wave $wave/3: ok (simulated)"
done
echo "deployed $service@$version to $env (simulated)"
