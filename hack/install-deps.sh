#!/usr/bin/env bash
# Installs the host packages skillbox needs to build images and run sandboxes
# (Debian 12). Idempotent and quiet when everything is already there.
set -euo pipefail

# jq, gcc and openssl: hack/kube.sh (the test cluster's JSON, its static pause
# binary, its PKI).
# chromium and fonts-dejavu-core: the console's browser test (TestConsoleBrowser
# drives Debian's Chromium with playwright-core; no browser is downloaded).
pkgs=(runsc runc containerd mmdebstrap ca-certificates iproute2 procps jq gcc libc6-dev openssl chromium fonts-dejavu-core)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing ${missing[*]}; run as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # apt's chatter (debconf's "delaying package configuration" and the like)
  # is shown only when the install fails.
  if ! out=$(apt-get install -y -qq --no-install-recommends "${missing[@]}" 2>&1); then
    printf '%s\n' "$out" | tail -n 30 >&2
    echo "install-deps: apt-get install ${missing[*]} failed (its last lines above)" >&2
    exit 1
  fi
fi

if ! command -v go >/dev/null 2>&1 && [[ ! -x /usr/local/go/bin/go ]]; then
  echo "install-deps: Go 1.26 is required (https://go.dev/doc/install)" >&2
  exit 1
fi
# The pinned gVisor skillbox runs by default (Debian's runsc stays for
# `runtime "runsc" { binary = "/usr/bin/runsc" }`).
"$(dirname "$0")/install-runsc.sh"
pinned=$("$(dirname "$0")/install-runsc.sh" --path)
echo "install-deps: runsc $("$pinned" --version 2>/dev/null | head -1 | awk '{print $3}') (pinned), Debian's runsc $(runsc --version 2>/dev/null | head -1 | awk '{print $3}'), runc $(runc --version | head -1 | awk '{print $3}'), mmdebstrap $(mmdebstrap --version | awk '{print $2}')" >&2
