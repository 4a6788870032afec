#!/bin/sh
# test-rootfs.sh DIR — build the rootfs the runtime integration tests run in:
# Debian bookworm with python3, bash, coreutils and nodejs, made by mmdebstrap
# (no container registry, no daemon). /etc/hosts must exist: the runtime
# mounts its generated hosts file on it. The tests cache it at
# /var/cache/skillbox/test-rootfs; set SKILLBOX_TEST_ROOTFS to use another one.
# Later the images package supplies real interpreter images; this is only the
# stand-in the runtime tests need. Needs root (device nodes, ownership).
set -eu

dir=${1:?usage: test-rootfs.sh DIR}
mirror=${SKILLBOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# The recipe's version, stamped into the rootfs: a rootfs cached on a
# machine by an older recipe (say, one without /etc/hosts or /skills) is
# rebuilt rather than failing every test. Bump it when the recipe changes.
recipe=3
stamp=etc/skillbox-test-rootfs
if [ "$(cat "$dir/$stamp" 2>/dev/null)" = "$recipe" ]; then
	echo "test-rootfs: $dir already built (recipe $recipe)" >&2
	exit 0
fi
command -v mmdebstrap >/dev/null 2>&1 || {
	echo "test-rootfs: mmdebstrap missing: install it with: apt-get install mmdebstrap" >&2
	exit 1
}

# Build next to the target and rename at the end so an interrupted build never
# leaves a half-made rootfs where the tests would pick it up.
tmp="$dir.tmp.$$"
rm -rf "$tmp"
mkdir -p "$(dirname "$dir")"
trap 'rm -rf "$tmp"' EXIT INT TERM

mmdebstrap --variant=apt --mode=root \
	--include=python3,bash,coreutils,nodejs \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
	--customize-hook='[ -e "$1/etc/hosts" ] || printf "127.0.0.1\tlocalhost\n::1\tlocalhost\n" > "$1/etc/hosts"' \
	--customize-hook='mkdir -m 0755 -p "$1/skill" "$1/skills" "$1/work"' \
	--customize-hook="echo $recipe > \"\$1/$stamp\"" \
	bookworm "$tmp" "$mirror"

rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT INT TERM
echo "test-rootfs: built $dir" >&2
