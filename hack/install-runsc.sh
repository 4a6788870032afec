#!/usr/bin/env bash
# Builds and installs the runsc (gVisor) that skillbox pins, from the Go
# module proxy: no container registry, no release bucket. The module's go.sum
# hash (h1:) is pinned here and checked against what the proxy serves before
# anything is built; the version is stamped into the binary, so that
# `runsc --version` (and every skillbox run result) names it. Idempotent and
# quiet when the pinned runsc is already installed.
#
#   hack/install-runsc.sh            install into /usr/local/lib/skillbox/runsc/<version>/runsc
#   PREFIX=/opt/x hack/install-runsc.sh
#   hack/install-runsc.sh --path     print where the pinned runsc goes
#
# The gVisor containerd shim (containerd-shim-runsc-v1, the runtime handler
# io.containerd.runsc.v1 of skillbox's containerd backend) is built from the
# same module and installed next to runsc; put that directory on containerd's
# PATH (hack/containerd.sh does) to use it.
#
# Keep RUNSC_MODULE_VERSION, RUNSC_VERSION and RUNSC_MODULE_SUM in step with
# runtime.PinnedRunscVersion (runtime/pinned.go).
set -euo pipefail

RUNSC_MODULE=gvisor.dev/gvisor
RUNSC_MODULE_VERSION=v0.0.0-20260905035102-160fafc42237
RUNSC_MODULE_SUM='h1:AU5+CtCvnBnxdZRNcZt1NfSLqgkXZVT3N/u6u1aXg44='
RUNSC_VERSION=release-20260905.0+160fafc42237
# Optional: the sha256 of the binary built by a given Go version (builds are
# reproducible for one toolchain; another toolchain gives another hash).
RUNSC_BINARY_GO=go1.26.8
RUNSC_BINARY_SHA256=bb2e098e1c38ef4430a9739ad8e351afc55b604d5239302bb4e4d01cc015c160

PREFIX=${PREFIX:-/usr/local/lib/skillbox/runsc}
dest="$PREFIX/$RUNSC_VERSION"
bin="$dest/runsc"
shim="$dest/containerd-shim-runsc-v1"
if [[ ${1:-} == --path ]]; then
  echo "$bin"
  exit 0
fi

have_version() {
  [[ -x $bin ]] && [[ $("$bin" --version 2>/dev/null | head -1) == "runsc version $RUNSC_VERSION" ]]
}
if have_version && [[ -x $shim ]] && [[ -f $dest/SHA256SUMS ]] && (cd "$dest" && sha256sum --quiet -c SHA256SUMS); then
  exit 0
fi

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
if [[ ! -x $GO ]]; then
  echo "install-runsc: Go is required to build runsc (https://go.dev/doc/install)" >&2
  exit 1
fi
if [[ $(id -u) -ne 0 && ! -w $(dirname "$PREFIX") ]]; then
  echo "install-runsc: cannot write $PREFIX; run as root" >&2
  exit 1
fi

# The builds fetch gVisor's dependencies, one "go: downloading" line each
# (about 45 on a fresh machine): that chatter goes to a log, kept only when
# a build fails, so that `make demo` prints one progress line per step.
work=$(mktemp -d /tmp/skillbox-runsc.XXXXXX)
log=$(mktemp /tmp/skillbox-runsc-build.XXXXXX.log)
keep_log=
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"; [[ -n $keep_log ]] || rm -f "$log"' EXIT
export GOPATH="$work/gopath" GOMODCACHE="${GOMODCACHE:-$work/gopath/pkg/mod}" GOFLAGS=-modcacherw CGO_ENABLED=0

quietly() {
  local what=$1
  shift
  if ! "$@" >>"$log" 2>&1; then
    keep_log=1
    echo "install-runsc: $what failed; the last lines of its log, $log:" >&2
    { grep -v '^go: downloading ' "$log" || true; } | tail -n 30 >&2
    exit 1
  fi
}

# 1. Fetch the module and check its hash before building anything from it.
sum=$("$GO" mod download -json "$RUNSC_MODULE@$RUNSC_MODULE_VERSION" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p')
if [[ $sum != "$RUNSC_MODULE_SUM" ]]; then
  echo "install-runsc: $RUNSC_MODULE@$RUNSC_MODULE_VERSION has hash ${sum:-none}, want $RUNSC_MODULE_SUM; refusing to build" >&2
  exit 1
fi

# 2. Build it with its version stamped in.
echo "install-runsc: building runsc $RUNSC_VERSION (about a minute)" >&2
quietly "building runsc" env GOBIN="$work/bin" "$GO" install -trimpath \
  -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" \
  "$RUNSC_MODULE/runsc@$RUNSC_MODULE_VERSION"
# sed, not head: head exits after one line and, with pipefail, the SIGPIPE
# runsc then gets would fail this line about every other time.
got=$("$work/bin/runsc" --version | sed -n 1p)
if [[ $got != "runsc version $RUNSC_VERSION" ]]; then
  echo "install-runsc: built binary reports '$got', want 'runsc version $RUNSC_VERSION'" >&2
  exit 1
fi
binsum=$(sha256sum "$work/bin/runsc" | awk '{print $1}')
gover=$("$GO" env GOVERSION)
if [[ -n $RUNSC_BINARY_SHA256 && $gover == "$RUNSC_BINARY_GO" && $binsum != "$RUNSC_BINARY_SHA256" ]]; then
  echo "install-runsc: runsc built with $gover has sha256 $binsum, want $RUNSC_BINARY_SHA256" >&2
  exit 1
fi

# 3. The containerd shim, from the same module (its command is named shim).
echo "install-runsc: building containerd-shim-runsc-v1 (about a minute)" >&2
quietly "building containerd-shim-runsc-v1" env GOBIN="$work/bin" "$GO" install -trimpath -ldflags "-s -w" "$RUNSC_MODULE/shim@$RUNSC_MODULE_VERSION"

# 4. Install them, with what they were built from recorded next to them.
install -d -m 0755 "$dest"
install -m 0755 "$work/bin/runsc" "$bin.new"
mv -f "$bin.new" "$bin"
install -m 0755 "$work/bin/shim" "$shim.new"
mv -f "$shim.new" "$shim"
cat >"$dest/BUILDINFO" <<INFO
module  $RUNSC_MODULE@$RUNSC_MODULE_VERSION
sum     $RUNSC_MODULE_SUM
version $RUNSC_VERSION
go      $gover
sha256  $binsum
shim    containerd-shim-runsc-v1 sha256 $(sha256sum "$shim" | awk '{print $1}')
INFO
(cd "$dest" && sha256sum runsc containerd-shim-runsc-v1 >SHA256SUMS)
echo "install-runsc: installed $bin ($RUNSC_VERSION, sha256 $binsum)" >&2
